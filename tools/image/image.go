package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's settings: the Containerfile says the same (image_test.go).
const (
	User       = "65532:65532"
	uid        = 65532
	DataDir    = "/var/lib/tollgate"
	ConfigPath = "/etc/tollgate/tollgate.yaml"
	ZoneInfo   = "/usr/share/zoneinfo.zip"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
)

var (
	Entrypoint = []string{"/tollgate"}
	Cmd        = []string{"serve", "--config", ConfigPath}
	Ports      = []string{"8080/tcp", "4318/tcp", "4317/tcp"}
	Env        = []string{
		"ZONEINFO=" + ZoneInfo,
		"TOLLGATE_UPSTREAM_URL=http://host.containers.internal:8000/v1",
	}
	Labels = map[string]string{
		"org.opencontainers.image.title":       "tollgate",
		"org.opencontainers.image.description": "An observability gateway for LLM inference",
		"org.opencontainers.image.source":      "https://github.com/tollgate-dev/tollgate",
	}
)

// Sources are the files the image is made of, from the build machine.
type Sources struct {
	Root   string // tollgate's checkout: deploy/image/tollgate.yaml
	Binary string // the static tollgate binary
}

// caBundles are where Linux distributions keep the PEM bundle of CA roots
// (crypto/x509's own list, root_linux.go); the first present is copied.
var caBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// Assemble builds the image for linux/amd64 (or the machine's arch).
func Assemble(src Sources) (v1.Image, error) {
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/var/lib/tollgate:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/tollgate/", mode: 0o755, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/share/", mode: 0o755, dir: true},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: "var/lib/tollgate/", mode: 0o700, dir: true, uid: uid},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	ca, err := firstFile(caBundles)
	if err != nil {
		return nil, fmt.Errorf("CA roots: %w", err)
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	zi, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		return nil, fmt.Errorf("time-zone data: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(src.Root, "deploy", "image", "tollgate.yaml"))
	if err != nil {
		return nil, err
	}
	files = append(files,
		file{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, data: ca},
		file{name: strings.TrimPrefix(ZoneInfo, "/"), mode: 0o644, data: zi},
		file{name: strings.TrimPrefix(ConfigPath, "/"), mode: 0o644, data: cfg},
	)
	bin, err := os.ReadFile(src.Binary)
	if err != nil {
		return nil, err
	}

	base, err := layer(files)
	if err != nil {
		return nil, err
	}
	app, err := layer([]file{{name: "tollgate", mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = runtime.GOARCH
	cf.OS = "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = Entrypoint
	cf.Config.Cmd = Cmd
	cf.Config.User = User
	cf.Config.WorkingDir = DataDir
	cf.Config.Env = Env
	cf.Config.Labels = Labels
	cf.Config.Volumes = map[string]struct{}{DataDir: {}}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	return mutate.ConfigFile(img, cf)
}

// epoch dates every file and the image: the same inputs give the same
// digest (reproducible, like SOURCE_DATE_EPOCH=0).
var epoch = time.Unix(0, 0).UTC()

type file struct {
	name string
	mode int64
	dir  bool
	uid  int
	data []byte
}

func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: epoch, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

func firstFile(paths []string) ([]byte, error) {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("no CA bundle on this machine (" + strings.Join(paths, ", ") + "); install ca-certificates")
}

// WriteTarball writes a docker-archive tarball tagged tag.
func WriteTarball(img v1.Image, tag, path string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, ref, img)
}

// WriteLayout writes (or adds to) an OCI image layout in dir.
func WriteLayout(img v1.Image, dir string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
}
