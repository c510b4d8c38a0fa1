package ipcns

// Caller is the thread on whose behalf an engine call runs: its
// credentials and its process's pid handle. The handle is what objects
// record (sempid, msg_lspid), and its namespace is where pids are
// reported to this caller.
type Caller struct {
	Creds Creds
	// Pid is the caller's thread group.
	Pid *Pid
}

// PidNS returns the pid namespace in which pids are reported to c.
func (c *Caller) PidNS() *PidNamespace {
	if c.Pid == nil {
		return nil
	}
	return c.Pid.Namespace()
}
