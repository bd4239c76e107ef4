package main

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// A one-node Slurm cluster on this machine (munged, a private MariaDB,
// slurmdbd, slurmctld and slurmd, started here in the foreground so that
// the test owns their PIDs, with a configuration written here that points
// every daemon at the loopback address) runs a 4-trial sweep end to end
// through fabric cluster slurm --submit: the job array, one task per trial
// on the whole node, and the merge job after it. The accounting printed is
// sacct's, the merged report has every trial, and nothing the test started
// is left.
func TestSlurmOneNodeSweep(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []string{"munged", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "mariadb-install-db",
		"sbatch", "squeue", "sinfo", "sacct"} {
		testenv.RequireCommand(t, c)
	}
	bin := fabricBinary(t)
	sc := startSlurm(t)
	prefix := emutest.Prefix(t, "sl")
	exp := filepath.Join(sc.dir, "sweep.yaml")
	const sweep = `name: slurm-sweep
lab: {name: slurm, topology: {kind: star, hosts: 3}, links: {rate: 20Mbit}}
schemes:
  cubic: {cc: cubic}
  dctcp: {cc: dctcp, ports: {marking: {ecn: {threshold: 30KB}}}}
traffic: {pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest, load: 0.3}
duration: 2s
trials: 2
seed: 7
`
	if err := os.WriteFile(exp, []byte(sweep), 0o644); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(sc.dir, "shared")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, bin, "cluster", "slurm", exp, "--dir", shared, "--submit", "--every", "1s",
		"--prefix", prefix, "--lab-prefix", prefix)
	cmd.Env = sc.env
	out, err := cmd.CombinedOutput()
	t.Logf("fabric cluster slurm --submit, %v:\n%s", time.Since(t0).Round(time.Second), out)
	if err != nil {
		t.Fatalf("fabric cluster slurm: %v\n%s", err, sc.logs())
	}
	if !strings.Contains(string(out), "4 trials: 4 done") {
		t.Errorf("the sweep's status is not 4 trials done")
	}
	checkSacct(t, string(out))
	report, err := os.ReadFile(filepath.Join(shared, "results", "report.md"))
	if err != nil {
		t.Fatalf("no merged report: %v", err)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"| cubic |", "| dctcp |", "## Machines", "| " + host + " |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("the merged report has no %q:\n%s", want, report)
		}
	}
	f, err := os.Open(filepath.Join(shared, "results", "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) != 5 {
		t.Errorf("summary.csv has %d trial rows (%v), want 4", len(rows)-1, err)
	}
	t.Logf("merged report:\n%s", report)
	st := exec.Command(bin, "cluster", "status", shared)
	st.Env = sc.env
	status, err := st.CombinedOutput()
	t.Logf("fabric cluster status:\n%s", status)
	if err != nil || !strings.Contains(string(status), "4 trials: 4 done") {
		t.Errorf("fabric cluster status: %v", err)
	}
	resubmitOne(ctx, t, bin, sc, shared)
}

// resubmitOne loses one trial's results and checks that --resubmit runs
// that trial alone again, through Slurm, until all four are done.
func resubmitOne(ctx context.Context, t *testing.T, bin string, sc *slurmCluster, shared string) {
	lost := filepath.Join(shared, "results", "dctcp", "trial-2")
	if err := os.RemoveAll(lost); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "cluster", "status", shared, "--resubmit", "--every", "1s")
	cmd.Env = sc.env
	out, err := cmd.CombinedOutput()
	t.Logf("fabric cluster status --resubmit:\n%s", out)
	if err != nil {
		t.Fatalf("fabric cluster status --resubmit: %v\n%s", err, sc.logs())
	}
	if !strings.Contains(string(out), "resubmitting 1 trial(s): 3") || !strings.Contains(string(out), "4 trials: 4 done") {
		t.Errorf("--resubmit did not run trial index 3 (dctcp, trial 2) alone to completion")
	}
	if _, err := os.Stat(filepath.Join(lost, "COMPLETE")); err != nil {
		t.Errorf("the resubmitted trial left no COMPLETE: %v", err)
	}
}

// checkSacct checks that the accounting fabric printed is sacct's, not
// squeue's fallback: a header naming JobID and State, and each of the four
// trial tasks COMPLETED.
func checkSacct(t *testing.T, out string) {
	t.Helper()
	_, acct, ok := strings.Cut(out, "\nsacct:\n")
	if !ok {
		t.Fatalf("fabric printed no sacct accounting")
	}
	lines := strings.Split(acct, "\n")
	if h := strings.Fields(lines[0]); !slices.Contains(h, "JobID") || !slices.Contains(h, "State") {
		t.Errorf("sacct's header is %q, want JobID and State", lines[0])
	}
	done := map[string]bool{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 2 && strings.Contains(f[0], "_") && slices.Contains(f, "COMPLETED") {
			done[f[0]] = true
		}
	}
	if len(done) != 4 {
		t.Errorf("sacct has %d trial tasks COMPLETED (%v), want 4", len(done), done)
	}
}

// slurmCluster is the daemons of a one-node cluster and their files.
type slurmCluster struct {
	dir   string
	env   []string
	procs []*exec.Cmd // in start order
}

// freePort is a TCP port free on the loopback now.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startSlurm writes a munge key and a one-node slurm.conf into a
// temporary directory and starts munged, slurmctld and slurmd in the
// foreground, then waits for the node to be idle.
func startSlurm(t *testing.T) *slurmCluster {
	dir, err := os.MkdirTemp("", "fabric-slurm")
	if err != nil {
		t.Fatal(err)
	}
	sc := &slurmCluster{dir: dir}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(sc.logs())
		}
		sc.stop(t)
	})
	for _, d := range []string{"munge", "state", "spool", "log", "db"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge", "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "munge", "munge.socket")
	sc.start(t, "munged", "-F", "--force", "--key-file", filepath.Join(dir, "munge", "munge.key"), "--socket", socket,
		"--pid-file", filepath.Join(dir, "munge", "munged.pid"), "--log-file", filepath.Join(dir, "log", "munged.log"),
		"--seed-file", filepath.Join(dir, "munge", "munged.seed"))
	waitFor(t, 10*time.Second, "munged's socket", func() bool { _, err := os.Stat(socket); return err == nil })
	conf := filepath.Join(dir, "slurm.conf")
	sc.env = append(os.Environ(), "SLURM_CONF="+conf)
	dbdPort := sc.startAccounting(t, socket)
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	text := fmt.Sprintf(`ClusterName=fabtest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
CommunicationParameters=NoInAddrAny
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/log/slurmctld.log
SlurmdLogFile=%[5]s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=%[6]d
AccountingStoragePass=%[4]s
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
MinJobAge=300
KillWait=5
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=fabric Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP
`, host, freePort(t), freePort(t), socket, dir, dbdPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sc.start(t, "slurmctld", "-D", "-f", conf)
	sc.start(t, "slurmd", "-D", "-f", conf)
	waitFor(t, 30*time.Second, "the node to be idle", func() bool {
		c := exec.Command("sinfo", "-h", "-o", "%T")
		c.Env = sc.env
		out, _ := c.Output()
		return strings.TrimSpace(string(out)) == "idle"
	})
	return sc
}

// startAccounting starts the storage sacct reads: a private MariaDB on a
// free loopback port (its own data directory and socket, no grant tables,
// since nothing but this test can reach it) and slurmdbd on it, whose
// slurmdbd.conf sits next to SLURM_CONF, where slurmdbd looks. It returns
// slurmdbd's port.
func (sc *slurmCluster) startAccounting(t *testing.T, mungeSocket string) int {
	data := filepath.Join(sc.dir, "db")
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	dbPort := freePort(t)
	sc.start(t, "mariadbd", "--no-defaults", "--datadir="+data, "--user=root", "--skip-grant-tables",
		"--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", dbPort), "--socket="+filepath.Join(data, "mariadbd.sock"),
		"--pid-file="+filepath.Join(data, "mariadbd.pid"), "--log-error="+filepath.Join(sc.dir, "log", "mariadbd.log"),
		"--skip-log-bin", "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0")
	waitFor(t, 30*time.Second, "mariadbd's port", func() bool { return dialable(dbPort) })
	dbdPort := freePort(t)
	text := fmt.Sprintf(`AuthType=auth/munge
AuthInfo=socket=%[1]s
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=%[2]d
SlurmUser=root
PidFile=%[3]s/slurmdbd.pid
LogFile=%[3]s/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=%[4]d
StorageUser=root
StorageLoc=slurm_acct_db
`, mungeSocket, dbdPort, sc.dir, dbPort)
	// slurmdbd refuses a configuration others may read or the SlurmUser does not own.
	if err := os.WriteFile(filepath.Join(sc.dir, "slurmdbd.conf"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	sc.start(t, "slurmdbd", "-D")
	waitFor(t, 30*time.Second, "slurmdbd's port", func() bool { return dialable(dbdPort) })
	return dbdPort
}

// dialable is whether a TCP connection to the loopback port opens.
func dialable(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// start starts a daemon in the foreground, its output in the log
// directory; stop ends it by its PID.
func (sc *slurmCluster) start(t *testing.T, name string, args ...string) {
	log, err := os.Create(filepath.Join(sc.dir, "log", name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c := exec.Command(name, args...)
	c.Env, c.Stdout, c.Stderr = sc.env, log, log
	if err := c.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	sc.procs = append(sc.procs, c)
}

// stop ends the daemons by PID, the last started first, and removes the
// cluster's directory.
func (sc *slurmCluster) stop(t *testing.T) {
	for i := len(sc.procs) - 1; i >= 0; i-- {
		c := sc.procs[i]
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-done
			t.Errorf("%s did not end within 10 s of SIGTERM; killed", filepath.Base(c.Path))
		}
	}
	sc.procs = nil
	if err := os.RemoveAll(sc.dir); err != nil {
		t.Error(err)
	}
}

// logs is the daemons' logs, for a failure's message.
func (sc *slurmCluster) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(sc.dir, "log", "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s\n", f, data[max(0, len(data)-3000):])
	}
	files, _ = filepath.Glob(filepath.Join(sc.dir, "shared", "logs", "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s\n%s\n", f, data[max(0, len(data)-2000):])
	}
	return b.String()
}

// waitFor polls ok every 100 ms until it holds, or fails t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	for end := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}
