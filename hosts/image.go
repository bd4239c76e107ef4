package hosts

import (
	"archive/tar"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/fabric-emu/fabric/images"
)

// ImageBuild says what BuildImage builds.
type ImageBuild struct {
	// Tag names the image; DefaultImage when empty.
	Tag string
	// Binary is the fabric executable to put in the image. It must be
	// statically linked, because the image is FROM scratch.
	Binary string
	// Dockerfile replaces images/host/Dockerfile (tests use it to make
	// images whose command misbehaves). Its build context holds the binary
	// as "fabric".
	Dockerfile []byte
	// Progress, if set, receives the daemon's build output.
	Progress io.Writer
}

// BuildImage builds the endpoint image through the Docker API, sending the
// Dockerfile and the binary as the whole build context. Nothing is pulled:
// the image is FROM scratch. It returns the image id.
func (d *Docker) BuildImage(ctx context.Context, b ImageBuild) (string, error) {
	if b.Tag == "" {
		b.Tag = DefaultImage
	}
	if b.Dockerfile == nil {
		b.Dockerfile = images.HostDockerfile
	}
	if err := checkStatic(b.Binary); err != nil {
		return "", err
	}
	cli, err := d.client(ctx)
	if err != nil {
		return "", err
	}

	// The image this build replaces under the tag, removed afterwards so
	// that rebuilding (make image) does not pile up untagged images.
	previous := ""
	if img, err := cli.ImageInspect(ctx, b.Tag); err == nil {
		previous = img.ID
	}

	buildContext, writer := io.Pipe()
	go func() { writer.CloseWithError(writeBuildContext(writer, b.Dockerfile, b.Binary)) }()
	defer buildContext.Close()

	res, err := cli.ImageBuild(ctx, buildContext, client.ImageBuildOptions{
		Tags:        []string{b.Tag},
		Remove:      true,
		ForceRemove: true,
	})
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", b.Tag, err)
	}
	defer res.Body.Close()
	if err := readBuildOutput(res.Body, b.Progress); err != nil {
		return "", fmt.Errorf("build image %s: %w", b.Tag, err)
	}
	img, err := cli.ImageInspect(ctx, b.Tag)
	if err != nil {
		return "", fmt.Errorf("build image %s: inspect result: %w", b.Tag, err)
	}
	if previous != "" && previous != img.ID {
		// Not forced: an image a running lab's containers use stays.
		if _, err := cli.ImageRemove(ctx, previous, client.ImageRemoveOptions{PruneChildren: true}); err != nil {
			slog.Debug("previous image kept", "image", previous, "err", err)
		}
	}
	return img.ID, nil
}

// RemoveImage deletes an image by tag or id; a missing image is not an error.
func (d *Docker) RemoveImage(ctx context.Context, ref string) error {
	cli, err := d.client(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	return nil
}

// checkStatic refuses a dynamically linked binary up front: in a FROM
// scratch image it would fail only at container start, with "no such file
// or directory" about a loader nobody asked for.
func checkStatic(path string) error {
	if path == "" {
		return errors.New("no fabric binary given for the image")
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("fabric binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("fabric binary %s is dynamically linked; the image is FROM scratch, so build it static: CGO_ENABLED=0 go build ./cmd/fabric", path)
		}
	}
	return nil
}

// writeBuildContext writes the tar stream the daemon builds from: the
// Dockerfile and the binary as "fabric".
func writeBuildContext(w io.Writer, dockerfile []byte, binary string) error {
	bin, err := os.Open(binary)
	if err != nil {
		return err
	}
	defer bin.Close()
	st, err := bin.Stat()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "fabric", Mode: 0o755, Size: st.Size(), ModTime: st.ModTime()}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, bin); err != nil {
		return err
	}
	return tw.Close()
}

// buildMessage is one JSON object of the daemon's build output stream.
type buildMessage struct {
	Stream      string `json:"stream"`
	Error       string `json:"error"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// readBuildOutput drains the build stream, copying progress text to
// progress, and returns the daemon's error if the build failed.
func readBuildOutput(r io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var m buildMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if msg := m.ErrorDetail.Message; msg != "" || m.Error != "" {
			if msg == "" {
				msg = m.Error
			}
			return errors.New(strings.TrimSpace(msg))
		}
		if progress != nil && m.Stream != "" {
			io.WriteString(progress, m.Stream)
		}
	}
}

// EnsureImage builds DefaultImage from this machine's fabric binary
// (FabricBinary) when the daemon does not have it, and says so in one log
// line. The image is FROM scratch and this binary, so there is nothing for
// a user to decide. Concurrent callers (a lab's hosts are made in parallel)
// wait for one build. A user's own image is never built or pulled.
func (d *Docker) EnsureImage(ctx context.Context) error {
	d.buildMu.Lock()
	defer d.buildMu.Unlock()
	cli, err := d.client(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.ImageInspect(ctx, DefaultImage); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", DefaultImage, err)
	}
	bin, err := FabricBinary()
	if err != nil {
		return fmt.Errorf("build %s: find the fabric binary: %w", DefaultImage, err)
	}
	slog.Info("building the endpoint image, which docker hosts run and the daemon lacks", "image", DefaultImage, "binary", bin)
	if _, err := d.BuildImage(ctx, ImageBuild{Binary: bin}); err != nil {
		return fmt.Errorf("image %s was missing and could not be built: %w", DefaultImage, err)
	}
	return nil
}
