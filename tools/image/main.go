// Command image assembles tollgate's container image without a container
// engine or a base image: the same image the Containerfile builds, from
// the static binary alone, with go-containerregistry. It writes a
// docker-archive tarball (`podman load -i`, `docker load -i`) and, with
// -layout, an OCI image layout.
//
//	cd tools/image && go run . -o ../../tollgate-image.tar
//	podman load -i tollgate-image.tar
//
// Layers, bottom up: the root file system (/etc/passwd and /etc/group with
// the non-root user 65532, the CA roots, Go's time-zone database, the
// default config, the /var/lib/tollgate volume owned by 65532), then the
// binary. The image's config mirrors the Containerfile's ENTRYPOINT, CMD,
// USER, EXPOSE, ENV, VOLUME, WORKDIR and LABELs; image_test.go checks it
// against the Containerfile.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	out := flag.String("o", "tollgate-image.tar", "docker-archive tarball to write")
	layoutDir := flag.String("layout", "", "also write an OCI image layout to this `dir`")
	bin := flag.String("binary", "", "a static linux tollgate `binary` to use; built from the checkout when empty")
	tag := flag.String("tag", "localhost/tollgate:dev", "image reference inside the tarball")
	root := flag.String("root", "../..", "tollgate's checkout")
	flag.Parse()
	if err := run(*root, *bin, *out, *layoutDir, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(root, bin, out, layoutDir, tag string) error {
	if bin == "" {
		dir, err := os.MkdirTemp("", "tollgate-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "tollgate")
		if err := Build(root, bin); err != nil {
			return err
		}
	}
	img, err := Assemble(Sources{Root: root, Binary: bin})
	if err != nil {
		return err
	}
	if err := WriteTarball(img, tag, out); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s)\n", out, tag)
	if layoutDir != "" {
		if err := WriteLayout(img, layoutDir); err != nil {
			return err
		}
		fmt.Printf("wrote OCI layout %s\n", layoutDir)
	}
	return nil
}

// Build compiles tollgate as the Containerfile's build stage does: static,
// trimmed paths, stripped, the version from the VCS information.
func Build(root, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=auto", "-ldflags=-s -w", "-o", out, "./cmd/tollgate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/tollgate: %v\n%s", err, strings.TrimSpace(string(b)))
	}
	return nil
}
