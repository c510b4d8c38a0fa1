// Package kernelipc runs System V IPC calls against the Linux kernel for
// differential tests: in a fresh IPC namespace of the test's own, from the
// test process or from child "actor" processes that can block, be
// signalled, exit and be killed. The engines' tests run the same scenario
// here and on the engine and compare every result.
//
// Test binaries that use actors call ServeActorIfChild first in TestMain.
// Creating IPC namespaces needs CAP_SYS_ADMIN; tests skip without it.
package kernelipc
