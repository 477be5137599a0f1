package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// built is the image assembled once for the tests, and its tarball.
var built struct {
	img v1.Image
	tar string
	bin string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tollgate-image-test-")
	if err != nil {
		panic(err)
	}
	built.bin = filepath.Join(dir, "tollgate")
	built.tar = filepath.Join(dir, "image.tar")
	if err := Build("../..", built.bin); err != nil {
		panic(err)
	}
	img, err := Assemble(Sources{Root: "../..", Binary: built.bin})
	if err != nil {
		panic(err)
	}
	if err := WriteTarball(img, "localhost/tollgate:test", built.tar); err != nil {
		panic(err)
	}
	// Read back what was written, as podman load would.
	if built.img, err = tarball.ImageFromPath(built.tar, nil); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// containerfile is the final stage of ../../Containerfile, as the image's
// config sees it.
type containerfile struct {
	entrypoint, cmd []string
	user, workdir   string
	env, ports      []string
	volumes         []string
	labels          map[string]string
	copies          []string // destinations of COPY
}

// parseContainerfile reads the instructions after the last FROM, joining
// continuation lines. Enough of the syntax for this file: JSON-form
// ENTRYPOINT, CMD and VOLUME, key=value ENV and LABEL.
func parseContainerfile(t *testing.T) containerfile {
	t.Helper()
	f, err := os.Open("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && cur == "" {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "FROM ") {
			lines = lines[i+1:]
			break
		}
	}
	cf := containerfile{labels: map[string]string{}}
	jsonArray := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("Containerfile: %q is not a JSON array: %v", s, err)
		}
		return v
	}
	for _, l := range lines {
		op, arg, _ := strings.Cut(l, " ")
		arg = strings.TrimSpace(arg)
		switch op {
		case "ENTRYPOINT":
			cf.entrypoint = jsonArray(arg)
		case "CMD":
			cf.cmd = jsonArray(arg)
		case "VOLUME":
			cf.volumes = jsonArray(arg)
		case "USER":
			cf.user = arg
		case "WORKDIR":
			cf.workdir = arg
		case "EXPOSE":
			cf.ports = strings.Fields(arg)
		case "ENV":
			cf.env = append(cf.env, strings.Fields(arg)...)
		case "LABEL":
			for _, kv := range splitQuoted(arg) {
				k, v, _ := strings.Cut(kv, "=")
				cf.labels[k] = strings.Trim(v, `"`)
			}
		case "COPY":
			f := strings.Fields(arg)
			cf.copies = append(cf.copies, f[len(f)-1])
		}
	}
	return cf
}

// splitQuoted splits on spaces outside double quotes.
func splitQuoted(s string) []string {
	var out []string
	var b strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			b.WriteRune(r)
		case r == ' ' && !quoted:
			if b.Len() > 0 {
				out = append(out, b.String())
				b.Reset()
			}
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// TestImageConfig: the assembled image's config is the Containerfile's,
// and both say what the issue asks: non-root, ports, labels, entrypoint.
func TestImageConfig(t *testing.T) {
	cfg, err := built.img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	cf := parseContainerfile(t)
	var ports, volumes []string
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	for v := range c.Volumes {
		volumes = append(volumes, v)
	}
	slices.Sort(ports)
	slices.Sort(volumes)
	slices.Sort(cf.ports)
	for _, d := range []struct {
		what      string
		want, got any
	}{
		{"ENTRYPOINT", cf.entrypoint, c.Entrypoint},
		{"CMD", cf.cmd, c.Cmd},
		{"USER", cf.user, c.User},
		{"WORKDIR", cf.workdir, c.WorkingDir},
		{"ENV", cf.env, c.Env},
		{"EXPOSE", cf.ports, ports},
		{"VOLUME", cf.volumes, volumes},
		{"LABEL", cf.labels, c.Labels},
	} {
		if diff := cmp.Diff(d.want, d.got); diff != "" {
			t.Errorf("%s: Containerfile (-) and image (+) differ:\n%s", d.what, diff)
		}
	}
	// What both must say, whatever they agree on.
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/tollgate"}) ||
		!slices.Equal(c.Cmd, []string{"serve", "--config", "/etc/tollgate/tollgate.yaml"}) ||
		!slices.Equal(ports, []string{"4317/tcp", "4318/tcp", "8080/tcp"}) || c.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("config %+v: want user 65532, entrypoint /tollgate serve --config, ports 8080 4317 4318, OCI labels", c)
	}
	if cfg.OS != "linux" {
		t.Errorf("os %q", cfg.OS)
	}
}

// TestImageFiles: the image holds the binary, CA roots, time-zone data, a
// passwd entry for 65532, the config and its volume owned by 65532 — and
// no shell. Every COPY destination of the Containerfile is there.
func TestImageFiles(t *testing.T) {
	rc := mutate.Extract(built.img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	content := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		files[name] = h
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			content[name], _ = io.ReadAll(tr)
		}
	}
	for _, p := range []string{"/bin/sh", "/bin/busybox", "/usr/bin/sh"} {
		if _, ok := files[p]; ok {
			t.Errorf("%s in the image: no shell wanted", p)
		}
	}
	if h := files["/tollgate"]; h == nil || h.Mode&0o111 == 0 || h.Size < 1<<20 {
		t.Errorf("/tollgate: %+v; want an executable binary", h)
	}
	if !strings.Contains(string(content["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532:\n%s", content["/etc/passwd"])
	}
	if h := files[CABundle]; h == nil || h.Size < 10000 {
		t.Errorf("%s: %+v; want the CA roots", CABundle, h)
	}
	if h := files[ZoneInfo]; h == nil || h.Size < 100000 {
		t.Errorf("%s: %+v; want Go's time-zone database", ZoneInfo, h)
	}
	want, err := os.ReadFile("../../deploy/image/tollgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := content[ConfigPath]; string(got) != string(want) {
		t.Errorf("%s differs from deploy/image/tollgate.yaml", ConfigPath)
	}
	if h := files[DataDir]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != 65532 {
		t.Errorf("%s: %+v; want a directory owned by 65532", DataDir, h)
	}
	for _, dst := range parseContainerfile(t).copies {
		if dst == "/etc/" {
			continue // passwd and group, checked above
		}
		if _, ok := files[strings.TrimSuffix(dst, "/")]; !ok {
			t.Errorf("Containerfile copies to %s; the assembled image has no such file", dst)
		}
	}
}

// TestImageConfigLoads: the image's default config is valid for the
// binary in it, with the image's environment.
func TestImageConfigLoads(t *testing.T) {
	cmd := exec.Command(built.bin, "config", "check", "--config", "../../deploy/image/tollgate.yaml")
	cfg, _ := built.img.ConfigFile()
	cmd.Env = cfg.Config.Env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tollgate config check: %v\n%s", err, out)
	}
	out, err := exec.Command(built.bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "tollgate ") {
		t.Errorf("tollgate --version: %q %v", out, err)
	}
}

// TestImageRuns loads the image into podman, runs it and reaches
// /healthz — where podman is there and can run containers.
func TestImageRuns(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman not found: the image was checked by its config and files only, not run")
	}
	if out, err := exec.Command(podman, "load", "-i", built.tar).CombinedOutput(); err != nil {
		t.Skipf("podman load failed (podman cannot run images here): %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	out, err := exec.Command(podman, "run", "-d", "--rm", "-p", "127.0.0.1:"+strconv.Itoa(port)+":8080", "localhost/tollgate:test").CombinedOutput()
	if err != nil {
		t.Skipf("podman run failed (no container runtime usable here): %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", id).Run() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command(podman, "logs", id).CombinedOutput()
			t.Fatalf("/healthz not 200 within 60s: %v\n%s", err, logs)
		}
		time.Sleep(100 * time.Millisecond) // polling, with the deadline above
	}
}
