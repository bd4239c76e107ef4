package hosts_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/hoststest"
	"github.com/fabric-emu/fabric/images"
	"github.com/fabric-emu/fabric/internal/testenv"
)

func TestDockerCreateStartRemove(t *testing.T) {
	testenv.RequireDocker(t)
	image := hoststest.BuildImage(t, nil)
	cli := hoststest.DockerClient(t)
	ctx := context.Background()
	d := &hosts.Docker{}
	lab := hoststest.UniqueName()
	ref := dockerRef(t, lab, "h1", image)
	t.Cleanup(func() { d.Remove(context.Background(), ref) })

	if v, err := d.APIVersion(ctx); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("negotiated Docker API version %s", v)
	}
	t0 := time.Now()
	if err := d.Create(ctx, ref); err != nil {
		t.Fatal(err)
	}
	t.Logf("Create took %s", time.Since(t0).Round(time.Millisecond))

	// The container: running, no network, labelled.
	ins, err := cli.ContainerInspect(ctx, hosts.ContainerName(ref), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ins.Container
	if !c.State.Running || c.HostConfig.NetworkMode != "none" || c.Config.Labels[hosts.LabelLab] != lab || c.Config.Labels[hosts.LabelNode] != "h1" {
		t.Fatalf("container: running=%v network=%q labels=%v", c.State.Running, c.HostConfig.NetworkMode, c.Config.Labels)
	}
	// /run/netns/fab.<lab>.h1 is the container's own namespace, which has
	// nothing but lo: emu adds the links.
	if got, want := nsInode(t, ref.NetNS), nsInode(t, fmt.Sprintf("/proc/%d/ns/net", c.State.Pid)); got != want {
		t.Fatalf("%s is namespace %d, container's is %d", ref.NetNS, got, want)
	}
	nsh, err := netns.GetFromPath(ref.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(nsh)
	nsh.Close()
	if err != nil {
		t.Fatal(err)
	}
	links, err := h.LinkList()
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Attrs().Name != "lo" {
		t.Fatalf("container namespace has links %v, want only lo", links)
	}

	left, err := d.Leftovers(ctx, lab)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Node != "h1" || left[0].NetNS != ref.NetNS || left[0].Runtime != "docker" {
		t.Fatalf("Leftovers(%s) = %+v", lab, left)
	}

	// A process in the container: the image's own fabric, in the host's
	// namespace, with its output in the log on this side.
	logPath := filepath.Join(t.TempDir(), "sleep.log")
	p, err := hosts.StartFabric(ctx, ref, []string{"sleep"}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", p.PID())), nsInode(t, ref.NetNS); got != want {
		t.Errorf("exec'd process is in namespace %d, host's is %d", got, want)
	}
	waitForLog(t, logPath, hosts.SleepReady) // the pid is known before runc's execve
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID())); err != nil || exe != hosts.ImageFabricBinary {
		t.Errorf("exec'd process runs %q (%v), want the image's %s", exe, err, hosts.ImageFabricBinary)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := hoststest.WaitWithin(t, p, 10*time.Second); err != nil {
		t.Fatalf("fabric sleep after SIGTERM: %v", err)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}

	// A failing program: its exit code and its stderr reach us.
	failLog := filepath.Join(t.TempDir(), "fail.log")
	p, err = hosts.Start(ctx, ref, []string{hosts.ImageFabricBinary, "no-such-command"}, failLog)
	if err != nil {
		t.Fatal(err)
	}
	err = hoststest.WaitWithin(t, p, 10*time.Second)
	var ee *hosts.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || ee.Host != "h1" {
		t.Fatalf("Wait = %v, want an ExitError with code 1 on h1", err)
	}
	if b, _ := os.ReadFile(failLog); !strings.Contains(string(b), "unknown command") {
		t.Errorf("log %s = %q, want cobra's unknown-command error", failLog, b)
	}

	t0 = time.Now()
	if err := d.Remove(ctx, ref); err != nil {
		t.Fatal(err)
	}
	t.Logf("Remove took %s", time.Since(t0).Round(time.Millisecond))
	assertDockerHostGone(t, cli, ref)
	// Remove is what rollback and `down` call blindly: nothing left is fine.
	if err := d.Remove(ctx, ref); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := hosts.Start(ctx, ref, []string{"/fabric", "sleep"}, ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Start on a removed host = %v, want container not found", err)
	}
}

// A container whose command fails at once, as with a wrong image: with an
// endpoint image (which reports readiness) and with a foreign one (where
// Create can only watch for ExitGrace).
func TestDockerEarlyExit(t *testing.T) {
	testenv.RequireDocker(t)
	const dockerfile = "FROM scratch\nCOPY fabric /fabric\nENTRYPOINT [\"/fabric\"]\nCMD [\"exit-now\"]\n"
	for _, tc := range []struct{ name, dockerfile string }{
		{"endpoint", dockerfile + "LABEL " + hosts.LabelImage + "=" + hosts.ImageKindHost + "\n"},
		{"foreign", dockerfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			image := hoststest.BuildImage(t, []byte(tc.dockerfile))
			cli := hoststest.DockerClient(t)
			d := &hosts.Docker{ExitGrace: time.Second} // a loaded machine starts containers slowly
			ref := dockerRef(t, hoststest.UniqueName(), "h7", image)
			t.Cleanup(func() { d.Remove(context.Background(), ref) })

			err := d.Create(context.Background(), ref)
			if err == nil {
				t.Fatal("Create of a container that exits at once succeeded")
			}
			t.Logf("error: %v", err)
			for _, want := range []string{"host h7", "exited early", "code 1", `unknown command "exit-now"`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			assertDockerHostGone(t, cli, ref)
		})
	}
}

func TestDockerMissingImage(t *testing.T) {
	testenv.RequireDocker(t)
	cli := hoststest.DockerClient(t)
	d := &hosts.Docker{}
	ref := dockerRef(t, hoststest.UniqueName(), "h2", "fabric-endpoint:"+hoststest.Prefix+"-never-built")
	t.Cleanup(func() { d.Remove(context.Background(), ref) })

	err := d.Create(context.Background(), ref)
	if err == nil {
		t.Fatal("Create with a missing image succeeded")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"host h2", ref.Image, "not found", "build your image locally"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	assertDockerHostGone(t, cli, ref)
}

// An unreachable daemon needs neither root nor Docker: the client fails
// before anything is made.
func TestDockerUnreachableDaemon(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "no-daemon.sock")
	d := &hosts.Docker{Host: sock}
	ref := hosts.Ref{Lab: hoststest.UniqueName(), Node: "h3", Runtime: "docker", NetNS: filepath.Join(t.TempDir(), "fab.h3")}

	err := d.Create(context.Background(), ref)
	if err == nil {
		t.Fatal("Create against a bogus socket succeeded")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"host h3", "docker daemon not reachable", sock} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Lstat(ref.NetNS); !os.IsNotExist(err) {
		t.Errorf("namespace file %s was made (err=%v)", ref.NetNS, err)
	}
	// Listing leftovers must not fail `down` on machines without Docker.
	if left, err := d.Leftovers(context.Background(), ""); err != nil || len(left) != 0 {
		t.Errorf("Leftovers without a daemon = %v, %v; want none, nil", left, err)
	}
}

func TestBuildImageRejectsDynamicBinary(t *testing.T) {
	// /bin/sh is dynamically linked on every distribution this runs on; a
	// static one would make this test meaningless, so check first.
	if b, err := os.ReadFile("/bin/sh"); err != nil || !strings.Contains(string(b), "ld-linux") {
		testenv.SkipOrFail(t, "/bin/sh is not a dynamically linked ELF here")
	}
	_, err := (&hosts.Docker{Host: "unix:///nonexistent"}).BuildImage(context.Background(), hosts.ImageBuild{Binary: "/bin/sh"})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("BuildImage(/bin/sh) = %v, want a dynamically-linked error", err)
	}
}

// assertDockerHostGone checks that no container, mount or namespace file
// of ref is left.
func assertDockerHostGone(t *testing.T, cli *client.Client, ref hosts.Ref) {
	t.Helper()
	if _, err := cli.ContainerInspect(context.Background(), hosts.ContainerName(ref), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("container %s: inspect err=%v, want not found", hosts.ContainerName(ref), err)
	}
	if names := hoststest.Containers(t, cli, ref.Lab); len(names) > 0 {
		t.Errorf("containers of lab %s left: %v", ref.Lab, names)
	}
	hoststest.NoNetNS(t, ref.NetNS)
}

// BenchmarkDockerHost is the cost of one docker host: container create,
// start, readiness and namespace mount, then removal. emu creates hosts in
// parallel, so a lab pays roughly this once per worker round.
func BenchmarkDockerHost(b *testing.B) {
	testenv.RequireDocker(b)
	image := hoststest.BuildImage(b, nil)
	d := &hosts.Docker{}
	ctx := context.Background()
	var create, remove time.Duration
	for i := 0; b.Loop(); i++ {
		ref := dockerRef(b, hoststest.UniqueName(), fmt.Sprintf("h%d", i), image)
		t0 := time.Now()
		if err := d.Create(ctx, ref); err != nil {
			d.Remove(ctx, ref)
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := d.Remove(ctx, ref); err != nil {
			b.Fatal(err)
		}
		create += t1.Sub(t0)
		remove += time.Since(t1)
	}
	b.ReportMetric(float64(create.Milliseconds())/float64(b.N), "create-ms/host")
	b.ReportMetric(float64(remove.Milliseconds())/float64(b.N), "remove-ms/host")
}

// Rebuilding a tag removes the image it replaced, so `make image` does not
// pile up untagged 40 MB images.
func TestBuildImageReplacesPrevious(t *testing.T) {
	testenv.RequireDocker(t)
	bin, err := hoststest.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	// A label of its own: the endpoint Dockerfile and the same binary
	// make an image byte for byte equal to fabric-endpoint:latest when
	// another test built that, and an image two tags share is untagged,
	// not removed, when one of them moves.
	unique := append(append([]byte{}, images.HostDockerfile...), []byte("\nLABEL fabric.test="+hoststest.UniqueName()+"\n")...)
	tag := hoststest.BuildImage(t, unique)
	cli := hoststest.DockerClient(t)
	ctx := context.Background()
	first, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	// A different CMD makes a different image under the same tag.
	other := []byte("FROM scratch\nCOPY fabric /fabric\nENTRYPOINT [\"/fabric\"]\nCMD [\"sleep\", \"-v\"]\n")
	second, err := (&hosts.Docker{}).BuildImage(ctx, hosts.ImageBuild{Tag: tag, Binary: bin, Dockerfile: other})
	if err != nil {
		t.Fatal(err)
	}
	if second == first.ID {
		t.Fatal("second build produced the same image")
	}
	if _, err := cli.ImageInspect(ctx, first.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("replaced image %s still there (err=%v)", first.ID, err)
	}
}

// A docker lab on a machine without fabric's endpoint image builds it: the
// image is FROM scratch and this binary, so there is nothing to ask.
func TestDockerBuildsMissingDefaultImage(t *testing.T) {
	testenv.RequireDocker(t)
	cli := hoststest.DockerClient(t)
	bin, err := hoststest.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(hosts.EnvFabricBinary, bin)
	if _, err := cli.ImageRemove(context.Background(), hosts.DefaultImage, client.ImageRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	d := &hosts.Docker{}
	ref := dockerRef(t, hoststest.UniqueName(), "h1", "")
	t.Cleanup(func() { d.Remove(context.Background(), ref) })
	if err := d.Create(context.Background(), ref); err != nil {
		t.Fatalf("Create without the default image: %v", err)
	}
	if _, err := cli.ImageInspect(context.Background(), hosts.DefaultImage); err != nil {
		t.Fatalf("the default image was not built: %v", err)
	}
}
