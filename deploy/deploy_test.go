// Package deploy holds the node install of the shim (drop-in, installer,
// RuntimeClass, DaemonSet); its test keeps them valid.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
	appsv1 "k8s.io/api/apps/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// decode strictly decodes the one object of a manifest into out: an
// unknown or misspelt field fails.
func decode(t *testing.T, file string, out any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// runtimeEntry returns the drop-in's runtimes.ipc table.
func runtimeEntry(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version int
		Plugins map[string]struct {
			Containerd struct {
				Runtimes map[string]map[string]any
			}
		}
	}
	if err := toml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if c.Version != 3 {
		t.Fatalf("%s: version %d, want 3 (containerd 2.x)", file, c.Version)
	}
	return c.Plugins["io.containerd.cri.v1.runtime"].Containerd.Runtimes["ipc"]
}

func TestManifests(t *testing.T) {
	var rc nodev1.RuntimeClass
	decode(t, "runtimeclass.yaml", &rc)
	var ds appsv1.DaemonSet
	decode(t, "daemonset.yaml", &ds)
	if rc.APIVersion != "node.k8s.io/v1" || rc.Kind != "RuntimeClass" || ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" {
		t.Fatalf("kinds: %s %s, %s %s", rc.APIVersion, rc.Kind, ds.APIVersion, ds.Kind)
	}
	entry := runtimeEntry(t, "containerd-ipc-runtime.toml")
	if entry == nil || entry["runtime_type"] != "io.containerd.ipc.v2" || entry["runtime_path"] != "/usr/local/bin/containerd-shim-ipc-v2" {
		t.Fatalf("drop-in runtimes.ipc = %v", entry)
	}
	if rc.Handler != "ipc" {
		t.Errorf("RuntimeClass handler %q, the drop-in defines runtimes.ipc", rc.Handler)
	}
	// Pods of the class land only where the DaemonSet installs the shim.
	sel := ds.Spec.Template.Spec.NodeSelector
	if rc.Scheduling == nil || len(sel) == 0 || !equalMaps(rc.Scheduling.NodeSelector, sel) {
		t.Errorf("RuntimeClass nodeSelector %v, DaemonSet nodeSelector %v: must be the same", rc.Scheduling, sel)
	}
	for k, v := range sel {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			t.Errorf("label %s=%s: %v", k, v, errs)
		}
	}
	s, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !s.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet selector %v does not match its pods' labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	ps := ds.Spec.Template.Spec
	if len(ps.InitContainers) != 1 || len(ps.Containers) != 1 {
		t.Fatalf("want one init container and one container")
	}
	in := ps.InitContainers[0]
	if in.Command[0] != "/opt/containerd-shim-ipc/install.sh" || strings.Join(in.Command[1:], " ") != "--root /host" ||
		in.SecurityContext == nil || in.SecurityContext.Privileged == nil || !*in.SecurityContext.Privileged || !ps.HostPID {
		t.Errorf("installer container: %v (privileged, hostPID needed to restart containerd)", in.Command)
	}
	host := false
	for _, v := range ps.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/" {
			for _, m := range in.VolumeMounts {
				host = host || (m.Name == v.Name && m.MountPath == "/host")
			}
		}
	}
	if !host {
		t.Error("the host's / is not mounted at /host in the installer")
	}
	// The image (deploy/Dockerfile) holds what the commands name.
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/opt/containerd-shim-ipc/", "deploy/install.sh", "deploy/containerd-ipc-runtime.toml", "./cmd/ipcctl", "./cmd/containerd-shim-ipc-v2"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile does not mention %s", want)
		}
	}
	if c := ps.Containers[0]; c.Image != in.Image || c.Command[0] != "/opt/containerd-shim-ipc/ipcctl" {
		t.Errorf("exporter container %v image %s, installer image %s", c.Command, c.Image, in.Image)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestInstaller runs install.sh against temporary roots (no restart):
// the files it leaves, the config it leaves for each kind of existing
// config.toml, and that a second run changes nothing.
func TestInstaller(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"containerd-shim-ipc-v2", "ipcctl"} {
		os.WriteFile(filepath.Join(src, f), []byte("binary "+f), 0o644)
	}
	b, _ := os.ReadFile("containerd-ipc-runtime.toml")
	os.WriteFile(filepath.Join(src, "containerd-ipc-runtime.toml"), b, 0o644)
	const pat = `"/etc/containerd/conf.d/*.toml"`
	const (
		runcSystemd  = "\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
		otherSystemd = "\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n  SystemdCgroup = true # not the default\n" +
			"[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n"
		crunDefault = "\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = \"crun\"\n" +
			"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun.options]\n  SystemdCgroup = true\n"
		v2Inline      = "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  options = { BinaryName = \"/usr/sbin/runc\", SystemdCgroup = true }\n"
		v2DottedFalse = "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  options.SystemdCgroup = false\n"
	)
	for _, c := range []struct {
		name, config, want string
		dropIn             string // another drop-in in conf.d
		args               []string
		systemd            bool // the drop-in sets runc's SystemdCgroup
	}{
		{name: "no config", want: "version = 3\nimports = [" + pat + "]\n"},
		{name: "runc with systemd cgroups", config: "version = 3\n" + runcSystemd,
			want: "version = 3\nimports = [" + pat + "]\n" + runcSystemd, systemd: true},
		{name: "runc with systemd cgroups, --cgroupfs", config: "version = 3\n" + runcSystemd, args: []string{"--cgroupfs"},
			want: "version = 3\nimports = [" + pat + "]\n" + runcSystemd},
		{name: "no config, --systemd-cgroup", args: []string{"--systemd-cgroup"}, want: "version = 3\nimports = [" + pat + "]\n", systemd: true},
		{name: "another runtime with systemd cgroups", config: "version = 3\n" + otherSystemd,
			want: "version = 3\nimports = [" + pat + "]\n" + otherSystemd},
		{name: "default runtime crun with systemd cgroups", config: "version = 3\n" + crunDefault,
			want: "version = 3\nimports = [" + pat + "]\n" + crunDefault, systemd: true},
		{name: "version 2, inline options", config: "version = 2\n" + v2Inline,
			want: "version = 2\nimports = [" + pat + "]\n" + v2Inline, systemd: true},
		{name: "version 2, dotted key, false", config: "version = 2\n" + v2DottedFalse,
			want: "version = 2\nimports = [" + pat + "]\n" + v2DottedFalse},
		{name: "set in another drop-in", dropIn: runcSystemd, config: "version = 3\nimports = [" + pat + "]\n",
			want: "version = 3\nimports = [" + pat + "]\n", systemd: true},
		{name: "config without imports", config: "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  x = 1\n",
			want: "version = 2\nimports = [" + pat + "]\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  x = 1\n"},
		{name: "other imports", config: "version = 3\nimports = [\"/etc/containerd/other.toml\"]\n",
			want: "version = 3\nimports = [" + pat + ", \"/etc/containerd/other.toml\"]\n"},
		{name: "already imported", config: "version = 3\nimports = [" + pat + "]\n", want: "version = 3\nimports = [" + pat + "]\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			cfg := filepath.Join(root, "etc/containerd/config.toml")
			if c.config != "" {
				os.MkdirAll(filepath.Dir(cfg), 0o755)
				os.WriteFile(cfg, []byte(c.config), 0o644)
			}
			if c.dropIn != "" {
				os.MkdirAll(filepath.Join(root, "etc/containerd/conf.d"), 0o755)
				os.WriteFile(filepath.Join(root, "etc/containerd/conf.d/gpu.toml"), []byte("version = 3\n"+c.dropIn), 0o644)
			}
			run := func() string {
				args := append([]string{"./install.sh", "--root", root, "--src", src, "--no-restart"}, c.args...)
				out, err := exec.Command("sh", args...).CombinedOutput()
				if err != nil {
					t.Fatalf("install.sh: %v\n%s", err, out)
				}
				return string(out)
			}
			first := run()
			got, _ := os.ReadFile(cfg)
			if string(got) != c.want {
				t.Fatalf("config.toml:\n%s\nwant\n%s\n(install.sh said:\n%s)", got, c.want, first)
			}
			var parsed map[string]any
			if err := toml.Unmarshal(got, &parsed); err != nil {
				t.Fatalf("config.toml is not TOML: %v\n%s", err, got)
			}
			e := runtimeEntry(t, filepath.Join(root, "etc/containerd/conf.d/ipc-runtime.toml"))
			if e["runtime_type"] != "io.containerd.ipc.v2" {
				t.Fatalf("installed drop-in: %v", e)
			}
			opts, _ := e["options"].(map[string]any)
			if got := opts["SystemdCgroup"] == true; got != c.systemd || (!c.systemd && e["options"] != nil) {
				t.Fatalf("installed drop-in's options: %v, want SystemdCgroup %v", e["options"], c.systemd)
			}
			for _, f := range []string{"containerd-shim-ipc-v2", "ipcctl"} {
				st, err := os.Stat(filepath.Join(root, "usr/local/bin", f))
				if err != nil || st.Mode().Perm() != 0o755 {
					t.Fatalf("%s: %v %v", f, st, err)
				}
			}
			if !strings.Contains(first, "restart containerd") {
				t.Errorf("first run does not ask for a restart:\n%s", first)
			}
			snap := tree(t, root)
			if second := run(); strings.TrimSpace(second) != "unchanged" {
				t.Errorf("second run: %q, want unchanged", second)
			}
			if after := tree(t, root); after != snap {
				t.Errorf("second run changed the tree:\n%s\nthen\n%s", snap, after)
			}
		})
	}
}

// tree lists every file under root with its mode and contents.
func tree(t *testing.T, root string) string {
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		c := ""
		if fi.Mode().IsRegular() {
			x, _ := os.ReadFile(p)
			c = string(x)
		}
		b.WriteString(p + " " + fi.Mode().String() + "\n" + c + "\n")
		return nil
	})
	return b.String()
}

// A flag without its value is a usage error that names the flag.
func TestInstallerUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "hsot")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--root"}, "--root needs a directory (usage: install.sh"},
		{[]string{"--src"}, "--src needs a directory (usage: install.sh"},
		{[]string{"--root", ""}, "--root needs a directory"},
		{[]string{"--root", "--no-restart"}, "--root needs a directory"},
		{[]string{"--root", missing}, "--root " + missing + ": no such directory"},
		{[]string{"--bogus"}, "unknown argument --bogus (usage: install.sh"},
	} {
		out, err := exec.Command("sh", append([]string{"./install.sh"}, c.args...)...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("install.sh %q: %v\n%s", c.args, err, out)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("install.sh --root %s made it", missing)
	}
}
