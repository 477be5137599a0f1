package check

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/tollgate"

// valueSets are the chart's two documented configurations.
var valueSets = []struct {
	name, file string
	replicas   int32
	scaleOut   bool
}{
	{"default", "", 1, false},
	{"scale-out", chartDir + "/values-scaleout.yaml", 3, true},
}

func values(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestHelmLint is `helm lint --strict` through Helm's own linter.
func TestHelmLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			l := lint.All(chartDir, values(t, vs.file), "tollgate", true)
			for _, m := range l.Messages {
				// --strict: warnings fail too; INFO (e.g. "icon is
				// recommended") does not.
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// manifests is one rendering of the chart, decoded strictly.
type manifests struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	pdb            *policyv1.PodDisruptionBudget
	pvc            *corev1.PersistentVolumeClaim
	serviceMonitor *monitoringv1.ServiceMonitor
	prometheusRule *monitoringv1.PrometheusRule
}

// render is `helm template` with Helm's engine; every document is decoded
// into its Kubernetes API type with unknown fields and duplicate keys as
// errors, so a misspelt or misplaced field fails here, not in a cluster.
func render(t *testing.T, file string) manifests {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values(t, file), chartutil.ReleaseOptions{Name: "tollgate", Namespace: "llm", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var m manifests
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for _, doc := range strings.Split(out[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			var dst any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				m.deployment = &appsv1.Deployment{}
				dst = m.deployment
			case "v1 Service":
				m.service = &corev1.Service{}
				dst = m.service
			case "v1 ConfigMap":
				m.configMap = &corev1.ConfigMap{}
				dst = m.configMap
			case "v1 Secret":
				m.secret = &corev1.Secret{}
				dst = m.secret
			case "policy/v1 PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				dst = m.pdb
			case "v1 PersistentVolumeClaim":
				m.pvc = &corev1.PersistentVolumeClaim{}
				dst = m.pvc
			case "monitoring.coreos.com/v1 ServiceMonitor":
				m.serviceMonitor = &monitoringv1.ServiceMonitor{}
				dst = m.serviceMonitor
			case "monitoring.coreos.com/v1 PrometheusRule":
				m.prometheusRule = &monitoringv1.PrometheusRule{}
				dst = m.prometheusRule
			default:
				t.Fatalf("%s: unexpected %s %s", name, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), dst); err != nil {
				t.Fatalf("%s: strict decode into %T: %v\n%s", name, dst, err, doc)
			}
		}
	}
	if m.deployment == nil || m.service == nil || m.configMap == nil || m.secret == nil {
		t.Fatalf("rendered %v: want a Deployment, Service, ConfigMap and Secret", names)
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestHelmTemplate renders the default and the scale-out values and checks
// what the chart promises: probes on /healthz and /readyz, non-root with a
// read-only root, config from the ConfigMap and secrets from the Secret,
// a PodDisruptionBudget, and for scale-out ClickHouse, Redis, the
// ServiceMonitor and the PrometheusRule.
func TestHelmTemplate(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			m := render(t, vs.file)
			d := m.deployment
			if d.Spec.Replicas == nil || *d.Spec.Replicas != vs.replicas {
				t.Errorf("replicas %v; want %d", d.Spec.Replicas, vs.replicas)
			}
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Containers))
			}
			c := pod.Containers[0]
			probe := func(what string, p *corev1.Probe, path string) {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
					t.Errorf("%s probe %+v; want GET %s on port http", what, p, path)
				}
			}
			probe("liveness", c.LivenessProbe, "/healthz")
			probe("readiness", c.ReadinessProbe, "/readyz")
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" && p.ContainerPort == 8080 }) {
				t.Errorf("ports %+v; want http on 8080", c.Ports)
			}
			psc, sc := pod.SecurityContext, c.SecurityContext
			switch {
			case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532:
				t.Errorf("pod securityContext %+v; want non-root 65532", psc)
			case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
				t.Errorf("container securityContext %+v; want a read-only root, no escalation, no capabilities", sc)
			}
			if !slices.Equal(c.Args, []string{"serve", "--config", "/etc/tollgate/tollgate.yaml"}) {
				t.Errorf("args %v", c.Args)
			}
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != m.secret.Name {
				t.Errorf("envFrom %+v; want the Secret %s", c.EnvFrom, m.secret.Name)
			}
			var cmName string
			for _, v := range pod.Volumes {
				if v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
			if cmName != m.configMap.Name || !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/etc/tollgate" }) {
				t.Errorf("config volume %q mounted at /etc/tollgate; want ConfigMap %s", cmName, m.configMap.Name)
			}
			if m.pdb == nil || !reflect.DeepEqual(m.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("PodDisruptionBudget %+v; want one selecting the Deployment's pods", m.pdb)
			}
			if !reflect.DeepEqual(m.service.Spec.Selector, d.Spec.Selector.MatchLabels) {
				t.Errorf("Service selects %v; the pods are %v", m.service.Spec.Selector, d.Spec.Selector.MatchLabels)
			}

			cfg := checkConfig(t, m)
			if vs.scaleOut {
				for _, want := range []string{"backend: clickhouse", "url: ${TOLLGATE_CLICKHOUSE_URL}", "url: ${TOLLGATE_REDIS_URL}"} {
					if !strings.Contains(cfg, want) {
						t.Errorf("scale-out config lacks %q:\n%s", want, cfg)
					}
				}
				if m.serviceMonitor == nil || len(m.serviceMonitor.Spec.Endpoints) != 1 || m.serviceMonitor.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor %+v; want /metrics", m.serviceMonitor)
				}
				checkRules(t, m.prometheusRule)
			} else if m.serviceMonitor != nil || m.prometheusRule != nil {
				t.Errorf("default values render the Prometheus Operator's resources; they are optional")
			}
		})
	}
}

// checkConfig runs `tollgate config check` — tollgate's own strict
// loader — on the rendered ConfigMap, with the environment the pod gets
// from the Secret: an unknown key or a ${VAR} the Secret lacks fails.
func checkConfig(t *testing.T, m manifests) string {
	t.Helper()
	cfg, ok := m.configMap.Data["tollgate.yaml"]
	if !ok {
		t.Fatalf("ConfigMap has no tollgate.yaml: %v", m.configMap.Data)
	}
	p := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tollgateBin, "config", "check", "--config", p)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range m.secret.StringData {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("tollgate config check on the rendered ConfigMap: %v\n%s\n%s", err, out, cfg)
	}
	return cfg
}

// checkRules: the PrometheusRule carries deploy/prometheus/tollgate-rules.yml
// (the chart's copy is identical), every expression parses.
func checkRules(t *testing.T, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	src, err := os.ReadFile("../prometheus/tollgate-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(chartDir + "/files/tollgate-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, cp) {
		t.Errorf("%s/files/tollgate-rules.yml differs from deploy/prometheus/tollgate-rules.yml: cp deploy/prometheus/tollgate-rules.yml %s/files/", chartDir, chartDir)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(src, &want); err != nil {
		t.Fatalf("tollgate-rules.yml as a PrometheusRule spec: %v", err)
	}
	if pr == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	if !reflect.DeepEqual(pr.Spec, want) {
		t.Errorf("PrometheusRule's spec is not tollgate-rules.yml")
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if _, err := promql.ParseExpr(r.Expr.String()); err != nil {
				t.Errorf("group %s, rule %s%s: %v", g.Name, r.Record, r.Alert, err)
			}
			n++
		}
	}
	if n == 0 {
		t.Error("PrometheusRule has no rules")
	}
}
