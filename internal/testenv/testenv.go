// Package testenv holds the guards that privileged tests share.
//
// Tests that need root, namespaces, tc, eBPF or Docker call RequireRoot (or
// RequireDocker). On a developer's laptop without privileges they skip; in
// CI, where .ci/run sets FABRIC_REQUIRE_PRIVILEGED=1, a skip would hide a
// broken test, so it becomes a failure instead.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/dirs"
)

// EnvRequirePrivileged is the variable .ci/run sets.
const EnvRequirePrivileged = "FABRIC_REQUIRE_PRIVILEGED"

// EnvCIProof names the file in which the suite tells CI the user and
// mode it ran in (.ci/run).
const EnvCIProof = "FABRIC_CI_PROOF"

// Strict reports whether skips of privileged tests must fail.
func Strict() bool { return os.Getenv(EnvRequirePrivileged) == "1" }

// SkipOrFail skips t with reason, or fails it when Strict.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("privileged test cannot run (%s) but %s=1", reason, EnvRequirePrivileged)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails, in CI) unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root")
	}
	if testing.Short() && !Strict() {
		t.Skip("privileged test skipped in -short mode")
	}
}

// RequireDocker skips (or fails, in CI) unless root and the Docker daemon
// socket answers.
func RequireDocker(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(context.Background(), "unix", "/var/run/docker.sock")
	if err != nil {
		SkipOrFail(t, "docker daemon not reachable: "+err.Error())
		return
	}
	c.Close()
}

// RequireCommand skips (or fails, in CI) unless name is found in PATH: a
// program a test runs that fabric does not ship, such as python3 for the
// Python example transport (make deps installs it).
func RequireCommand(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		SkipOrFail(t, name+" not found in PATH: "+err.Error())
	}
}

// BuildFabric builds the fabric command (CGO_ENABLED=0, as the Makefile
// does) into a new temporary directory for tests that start fabric
// processes on hosts (transports, probes, agents). remove deletes it.
func BuildFabric() (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "fabric-bin")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "fabric")
	build := exec.Command("go", "build", "-o", path, "github.com/fabric-emu/fabric/cmd/fabric")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/fabric: %v\n%s", err, out)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// RunWithFabric is a TestMain for tests whose hosts run fabric's own
// processes (transports, probes, agents): it builds the fabric command,
// names it in binaryEnv (hosts.EnvFabricBinary) for the package's tests,
// runs them, removes the build and exits with their code.
func RunWithFabric(m *testing.M, binaryEnv string) {
	bin, remove, err := BuildFabric()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(binaryEnv, bin)
	removeState := OwnState()
	code := m.Run()
	removeState()
	remove()
	os.Exit(code)
}

// OwnState gives the test binary, and the fabric processes it starts, a
// state directory of their own (dirs.StateEnv), so that no test reads or
// writes the machine's profile: a suite that planned with the machine's
// profile where one was calibrated and without it elsewhere would test
// two different runs. It returns the function that removes the directory.
func OwnState() func() {
	if os.Getenv(dirs.StateEnv) != "" {
		return func() {} // the caller chose one
	}
	dir, err := os.MkdirTemp("", "fabric-test-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(dirs.StateEnv, dir)
	return func() {
		os.Unsetenv(dirs.StateEnv)
		os.RemoveAll(dir)
	}
}

// ReadCPU reads the machine's CPU times, for a test that logs how much of
// the CPU it had (cpustat.Times.Since), or fails the test.
func ReadCPU(t testing.TB) cpustat.Times {
	t.Helper()
	c, err := cpustat.Read()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
