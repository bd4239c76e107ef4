package hosts

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// Labels put on every container, so that `fabric down` finds them again
// even when a crash left no state file.
const (
	LabelLab   = "fabric.lab"
	LabelNode  = "fabric.node"
	LabelNetNS = "fabric.netns"
)

// LabelImage=ImageKindHost marks images whose command is `fabric
// sleep`, which prints SleepReady (images/host/Dockerfile sets it). The
// value is the host image's old name, which images already built carry.
const (
	LabelImage    = "fabric.image"
	ImageKindHost = "endpoint"
)

// SleepReady is the line `fabric sleep` prints on stdout once a SIGTERM
// will be handled rather than kill it.
const SleepReady = "fabric sleep: ready"

// DefaultImage is the tag `fabric image build` makes, and the image docker
// hosts run unless the lab file names another.
const DefaultImage = "fabric-endpoint:latest"

// DefaultExitGrace is how long Create watches a fresh container of an image
// not built by fabric for an early exit. A static binary that fails on start
// exits within tens of milliseconds; the grace trades certainty against
// lab build time, paid once per host. (Images from BuildImage report
// readiness instead, see SleepReady.)
const DefaultExitGrace = 100 * time.Millisecond

func init() {
	Register(RuntimeDocker, defaultDocker)
}

// defaultDocker is the registered runtime; Start uses its client for
// `docker exec`.
var defaultDocker = &Docker{}

// Docker runs each host as a container with NetworkMode "none" and makes
// the container's network namespace the host's: Create bind-mounts
// /proc/<pid>/ns/net at ref.NetNS, so emu puts the host's veth end straight
// into the container, and `fabric exec`, capture and tc treat the host like
// any other namespace.
type Docker struct {
	// Host is the daemon address, e.g. unix:///var/run/docker.sock. Empty
	// means $DOCKER_HOST or the default socket.
	Host string
	// ExitGrace overrides DefaultExitGrace.
	ExitGrace time.Duration

	mu      sync.Mutex
	buildMu sync.Mutex // one EnsureImage build at a time
	cli     *client.Client
	// pinged is set once a ping negotiated the API version (the daemon here
	// speaks 1.41 while the client would start at its own maximum).
	pinged bool
}

// client returns a connected client, pinging the daemon until one answers
// so that an unreachable daemon is reported as such, not as a failure of
// whatever call came first.
func (d *Docker) client(ctx context.Context) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cli == nil {
		opts := []client.Opt{client.FromEnv}
		if d.Host != "" {
			opts = append(opts, client.WithHost(d.Host))
		}
		cli, err := client.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("docker client: %w", err)
		}
		d.cli = cli
	}
	if !d.pinged {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := d.cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			return nil, fmt.Errorf("docker daemon not reachable at %s: %w", d.cli.DaemonHost(), err)
		}
		d.pinged = true
	}
	return d.cli, nil
}

// APIVersion is the API version the client settled on with the daemon.
func (d *Docker) APIVersion(ctx context.Context) (string, error) {
	cli, err := d.client(ctx)
	if err != nil {
		return "", err
	}
	return cli.ClientVersion(), nil
}

// ContainerName is the container of a docker host: fab.<lab>.<node>, the
// same name as its namespace under /run/netns.
func ContainerName(ref Ref) string { return netnsutil.Name(ref.Lab, ref.Node) }

// containerOf is the handle to address the container by: the recorded id
// if there is one, otherwise the deterministic name.
func containerOf(ref Ref) string {
	if ref.Handle != "" {
		return ref.Handle
	}
	return ContainerName(ref)
}

// hostError names the host in every error, as `fabric up` prints it.
func hostError(ref Ref, err error) error {
	return fmt.Errorf("host %s of lab %s: %w", ref.Node, ref.Lab, err)
}

// Create starts the host's container and mounts its network namespace at
// ref.NetNS. On any failure it undoes what it did, so nothing is left
// half-attached, and it never touches a namespace file or container that
// existed before it was called. The default image is built first when the
// daemon lacks it (EnsureImage); any other image must exist.
func (d *Docker) Create(ctx context.Context, ref Ref) (err error) {
	if ref.NetNS == "" {
		return hostError(ref, errors.New("no namespace path to mount the container's namespace at"))
	}
	cli, err := d.client(ctx)
	if err != nil {
		return hostError(ref, err)
	}
	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				err = errors.Join(err, fmt.Errorf("rollback: %w", uerr))
			}
		}
		err = hostError(ref, err)
	}()
	image := cmp.Or(ref.Image, DefaultImage)
	if image == DefaultImage {
		if err := d.EnsureImage(ctx); err != nil {
			return err
		}
	}
	// The empty file the namespace gets bind-mounted on; O_EXCL so that a
	// namespace someone else owns is never mounted over or deleted.
	if err := os.MkdirAll(filepath.Dir(ref.NetNS), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(ref.NetNS, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("namespace file: %w", err)
	}
	f.Close()
	undo = append(undo, func() error { return removeNetNSFile(ref.NetNS) })
	id, err := d.createContainer(ctx, cli, ref, image)
	if err != nil {
		return err
	}
	undo = append(undo, func() error { return removeContainer(context.WithoutCancel(ctx), cli, id) })
	return d.startAndAttach(ctx, cli, ref, id)
}

// createContainer creates (not starts) the host's container.
func (d *Docker) createContainer(ctx context.Context, cli *client.Client, ref Ref, image string) (string, error) {
	name := ContainerName(ref)
	cfg := &container.Config{
		Image:    image,
		Hostname: ref.Node,
		Labels:   map[string]string{LabelLab: ref.Lab, LabelNode: ref.Node, LabelNetNS: ref.NetNS},
	}
	hostCfg := &container.HostConfig{
		NetworkMode: "none",
		// An endpoint configures its own namespace like a process on a
		// netns host does: TCP_CONGESTION beyond the kernel's allowed list
		// (dctcp, cubic) needs CAP_NET_ADMIN, and ECN is the namespace's
		// net.ipv4.tcp_ecn, which needs /proc/sys writable. So /proc/sys
		// is left out of Docker's default read-only paths (the rest stay;
		// masked paths keep their default). The container runs fabric's
		// own binary as root, as a netns host does, so this grants it
		// nothing a netns endpoint lacks.
		CapAdd:        []string{"NET_ADMIN"},
		ReadonlyPaths: readonlyPaths,
	}
	if ref.RunDir != "" {
		// Same path inside and out, so an endpoint's record and log paths
		// under the run directory mean the same file in both runtimes.
		dir, err := filepath.Abs(ref.RunDir)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		hostCfg.Binds = []string{dir + ":" + dir}
	}
	if ref.Hold {
		// fabric's static binary, mounted read-only, keeps the container
		// up (`fabric sleep`) whatever the image holds, FROM scratch too.
		bin, err := FabricBinary()
		if err != nil {
			return "", err
		}
		if err := checkStatic(bin); err != nil {
			return "", err
		}
		hostCfg.Binds = append(hostCfg.Binds, bin+":"+heldFabric+":ro")
		cfg.Entrypoint, cfg.Cmd = []string{heldFabric}, []string{"sleep"}
		cfg.Labels[LabelImage] = ImageKindHost // it prints SleepReady
	}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hostCfg})
	switch {
	case cerrdefs.IsNotFound(err):
		return "", fmt.Errorf("image %q not found (no registry is reachable: build your image locally; fabric builds only its own, %s)", image, DefaultImage)
	case cerrdefs.IsConflict(err):
		return "", fmt.Errorf("container %s already exists (left over from an earlier lab? `fabric down %s` removes it)", name, ref.Lab)
	case err != nil:
		return "", fmt.Errorf("create container %s: %w", name, err)
	}
	return created.ID, nil
}

// startAndAttach starts the container, bind-mounts its network namespace
// at ref.NetNS and waits for it to settle: an endpoint image says when its
// command is up (it prints SleepReady), so an early exit is caught for
// certain; for any other image, watching for ExitGrace is the best there
// is.
func (d *Docker) startAndAttach(ctx context.Context, cli *client.Client, ref Ref, id string) error {
	name := ContainerName(ref)
	// Subscribe to the exit before starting, so that an exit in the gap
	// between start and inspect is not missed.
	waitCtx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	exited := cli.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", name, err)
	}
	inspected, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect container %s: %w", name, err)
	}
	// exitCode is the code of a container seen to have stopped; the exit
	// watch has it, or will in a moment.
	exitCode := func() int {
		select {
		case w := <-exited.Result:
			return int(w.StatusCode)
		case <-time.After(5 * time.Second):
			return -1
		}
	}
	state := inspected.Container.State
	if state == nil || !state.Running || state.Pid == 0 {
		return d.exitedEarly(ctx, cli, name, id, exitCode())
	}
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/net", state.Pid), ref.NetNS, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.ENOENT) { // the process went away between inspect and mount
			return d.exitedEarly(ctx, cli, name, id, exitCode())
		}
		return fmt.Errorf("bind-mount namespace of container %s (pid %d) at %s: %w", name, state.Pid, ref.NetNS, err)
	}
	// removeNetNSFile (already queued) unmounts before it deletes.
	settle := cmp.Or(d.ExitGrace, DefaultExitGrace)
	var ready <-chan struct{}
	if inspected.Container.Config != nil && inspected.Container.Config.Labels[LabelImage] == ImageKindHost {
		if ready, err = awaitReadyLine(waitCtx, cli, id); err != nil {
			return fmt.Errorf("follow output of container %s: %w", name, err)
		}
		settle = readyTimeout
	}
	select {
	case <-ready:
	case w := <-exited.Result:
		return d.exitedEarly(ctx, cli, name, id, int(w.StatusCode))
	case err := <-exited.Error:
		return cmp.Or(ctx.Err(), fmt.Errorf("watch container %s: %w", name, err))
	case <-time.After(settle):
		if ready != nil {
			return fmt.Errorf("container %s did not report ready within %s", name, settle)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// heldFabric is where a held container (Ref.Hold) has fabric's binary.
const heldFabric = "/.fabric/fabric"

// ImageCommand is the command an image runs (its entrypoint and cmd), for
// starting a held container's own program with StartCommand.
func (d *Docker) ImageCommand(ctx context.Context, image string) ([]string, error) {
	cli, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	img, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w (fabric never pulls or builds your image: build it locally)", image, err)
	}
	var argv []string
	if img.Config != nil {
		argv = append(append(argv, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("image %s has no ENTRYPOINT or CMD to run", image)
	}
	return argv, nil
}

// ImageCommand is Docker.ImageCommand on the default daemon.
func ImageCommand(ctx context.Context, image string) ([]string, error) {
	return defaultDocker.ImageCommand(ctx, image)
}

// readyTimeout bounds how long Create waits for an endpoint image's
// command to report ready: generous, as a loaded machine is slow to start
// containers, and only reached if something is badly wrong.
const readyTimeout = 30 * time.Second

// awaitReadyLine follows a container's stdout and closes the returned
// channel when it prints SleepReady. The stream ends with ctx.
func awaitReadyLine(ctx context.Context, cli *client.Client, id string) (<-chan struct{}, error) {
	logs, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, Follow: true})
	if err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, logs)
		pw.CloseWithError(err)
		logs.Close()
	}()
	go func() {
		defer pr.Close() // ends the copy above if it is still running
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if sc.Text() == SleepReady {
				close(ready)
				return
			}
		}
	}()
	return ready, nil
}

// readonlyPaths is Docker's default list of read-only /proc paths (moby
// oci/defaults.go) without /proc/sys.
var readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sysrq-trigger"}

// exitedEarly reports a container whose command ended, with the last lines
// it printed, which usually say why.
func (d *Docker) exitedEarly(ctx context.Context, cli *client.Client, name, id string, code int) error {
	msg := fmt.Sprintf("container %s exited early", name)
	if code >= 0 {
		msg += fmt.Sprintf(" with code %d", code)
	}
	if tail := containerLogTail(ctx, cli, id); tail != "" {
		msg += ": " + tail
	}
	return errors.New(msg)
}

// containerLogTail returns the last few lines a container wrote, on one line.
func containerLogTail(ctx context.Context, cli *client.Client, id string) string {
	logs, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return ""
	}
	defer logs.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, logs); err != nil && buf.Len() == 0 {
		return ""
	}
	return strings.Join(strings.Fields(buf.String()), " ")
}

// Remove unmounts and deletes the host's namespace file and force-removes
// its container. Absent pieces are not an error.
func (d *Docker) Remove(ctx context.Context, ref Ref) error {
	var errs []error
	if ref.NetNS != "" {
		if err := removeNetNSFile(ref.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	cli, err := d.client(ctx)
	if err != nil {
		errs = append(errs, err)
	} else if err := removeContainer(ctx, cli, containerOf(ref)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return hostError(ref, err)
	}
	return nil
}

// removeNetNSFile unmounts a bind-mounted namespace and deletes its file.
// MNT_DETACH because a process may still hold the namespace open; the
// namespace itself lives on until its last user goes.
func removeNetNSFile(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func removeContainer(ctx context.Context, cli *client.Client, id string) error {
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// Leftovers lists the containers labelled with lab (any lab when lab is
// ""), running or not. With no daemon to ask there are no containers it
// could remove either, so an unreachable daemon lists nothing: `fabric
// down` of a netns lab must work on machines without Docker. (Remove still
// reports the daemon for hosts the lab's state names.)
func (d *Docker) Leftovers(ctx context.Context, lab string) ([]Ref, error) {
	cli, err := d.client(ctx)
	if err != nil {
		slog.Debug("docker leftovers not listed", "lab", lab, "err", err)
		return nil, nil
	}
	label := LabelLab
	if lab != "" {
		label += "=" + lab
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", label),
	})
	if err != nil {
		return nil, fmt.Errorf("list containers labelled %s: %w", label, err)
	}
	refs := make([]Ref, 0, len(list.Items))
	for _, c := range list.Items {
		refs = append(refs, Ref{
			Lab:     c.Labels[LabelLab],
			Node:    c.Labels[LabelNode],
			NetNS:   c.Labels[LabelNetNS],
			Runtime: "docker",
			Image:   c.Image,
			Handle:  c.ID,
		})
	}
	return refs, nil
}
