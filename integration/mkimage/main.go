// Command mkimage writes a one-layer OCI image archive (oci-layout) of a
// root filesystem directory, for `ctr images import`: the tests' images
// are made locally, without a registry.
//
//	mkimage -rootfs DIR -name localhost/ipct:1 -o image.tar [-- ENTRYPOINT...]
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

type desc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// layer tars dir with its symlinks, owned by root.
func layer(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func main() {
	rootfs := flag.String("rootfs", "", "root filesystem directory")
	name := flag.String("name", "", "image name (io.containerd.image.name)")
	out := flag.String("o", "", "output archive")
	flag.Parse()
	if *rootfs == "" || *name == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*rootfs, *name, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(rootfs, name, out string, entry []string) error {
	l, err := layer(rootfs)
	if err != nil {
		return err
	}
	cfg := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entry, "Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(l)}},
	}
	cb, _ := json.Marshal(cfg)
	man := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(cb), Size: int64(len(cb))},
		"layers":        []desc{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: digest(l), Size: int64(len(l))}},
	}
	mb, _ := json.Marshal(man)
	idx := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []desc{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(mb), Size: int64(len(mb)),
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
			Platform:    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		}},
	}
	ib, _ := json.Marshal(idx)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(n string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, b := range [][]byte{l, cb, mb} {
		if err := add("blobs/sha256/"+digest(b)[7:], b); err != nil {
			return err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", ib); err != nil {
		return err
	}
	return tw.Close()
}
