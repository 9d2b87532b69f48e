// Package check renders the Helm chart in ../edgehub with the helm of
// this module's tool directive and checks what it renders: every
// document decodes strictly into client-go's typed objects (the schema
// check that needs no network), and the objects keep the chart's
// invariants (plans/045-helm-chart.md).
package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const chart = "../edgehub"

// The value sets the tests render: the default (SQLite), and
// PostgreSQL with several servers, from a Secret of the user's or from
// a URL the chart puts in its own Secret.
var (
	sqlite          []string
	postgres        = []string{"replicaCount=3", "store.postgres.existingSecret=edgehub-store", "store.postgres.secretKey=dsn"}
	postgresFromURL = []string{"replicaCount=2", "store.postgres.url=postgres://edgehub:pw@db:5432/edgehub"}
)

// helm is the path of this module's helm tool, which go tool builds
// (once; later runs find it in the build cache) and names.
var helm string

func TestMain(m *testing.M) {
	out, err := exec.Command("go", "tool", "-n", "helm").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go tool -n helm:", err)
		os.Exit(1)
	}
	helm = strings.TrimSpace(string(out))
	os.Exit(m.Run())
}

// render runs helm template on the chart with the given --set values and
// decodes what it prints.
func render(t *testing.T, set ...string) []runtime.Object {
	t.Helper()
	out, err := helmTemplate(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := decodeStrictly(out)
	if err != nil {
		t.Fatalf("helm template --set %s: %v", strings.Join(set, ","), err)
	}
	return objects
}

// helmTemplate runs helm template and answers its standard
// output, or an error holding its standard error.
func helmTemplate(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helmTemplateArgs(t, args...)
}

func helmTemplateArgs(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "edgehub", chart, "--namespace", "hub"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm template %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// strict decodes YAML into the types client-go's scheme registers and
// refuses what they do not know: an unknown kind or apiVersion, an
// unknown or duplicated field, a value of the wrong type.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeStrictly splits helm's output into its documents and decodes
// each strictly; a document of comments only (a template that rendered
// nothing) is skipped.
func decodeStrictly(out []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objects []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var fields map[string]any
		if err := yaml.Unmarshal(doc, &fields); err != nil {
			return nil, fmt.Errorf("not YAML: %w\n%s", err, doc)
		}
		if len(fields) == 0 {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%v\n%s", err, doc)
		}
		if obj.GetObjectKind().GroupVersionKind() != *gvk {
			return nil, fmt.Errorf("decoded %v as %v", gvk, obj.GetObjectKind().GroupVersionKind())
		}
		// client-go still knows APIs that clusters no longer serve
		// (extensions/v1beta1 Deployments): a type with a deprecation
		// release is a beta or a replaced API, never what a chart should
		// render.
		if d, ok := obj.(interface{ APILifecycleDeprecated() (int, int) }); ok {
			major, minor := d.APILifecycleDeprecated()
			return nil, fmt.Errorf("%v is deprecated since Kubernetes %d.%d", gvk, major, minor)
		}
		objects = append(objects, obj)
	}
	if len(objects) == 0 {
		return nil, errors.New("helm rendered nothing")
	}
	return objects, nil
}

func ofType[T runtime.Object](objects []runtime.Object) []T {
	var found []T
	for _, o := range objects {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// workload is the one StatefulSet or Deployment the chart renders, as
// its kind, replicas and pod template.
func workload(t *testing.T, objects []runtime.Object) (kind string, replicas int32, pod corev1.PodTemplateSpec) {
	t.Helper()
	sets, deps := ofType[*appsv1.StatefulSet](objects), ofType[*appsv1.Deployment](objects)
	if len(sets)+len(deps) != 1 {
		t.Fatalf("%d StatefulSets and %d Deployments rendered, want one workload", len(sets), len(deps))
	}
	if len(sets) == 1 {
		return "StatefulSet", ptrValue(sets[0].Spec.Replicas), sets[0].Spec.Template
	}
	return "Deployment", ptrValue(deps[0].Spec.Replicas), deps[0].Spec.Template
}

// ptrValue is what an unset replicas means to the API server: 1.
func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// fromSecret checks that the container's variable name comes from key of
// secret through a secretKeyRef, never from a value in the pod template.
func fromSecret(t *testing.T, ct corev1.Container, name, secret, key string) {
	t.Helper()
	v, ok := env(ct, name)
	if !ok || v.Value != "" || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil {
		t.Fatalf("%s is %+v, want it from a secretKeyRef", name, v)
	}
	if ref := v.ValueFrom.SecretKeyRef; ref.Name != secret || ref.Key != key {
		t.Errorf("%s from %s/%s, want %s/%s", name, ref.Name, ref.Key, secret, key)
	}
}

func container(t *testing.T, pod corev1.PodTemplateSpec) corev1.Container {
	t.Helper()
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	return pod.Spec.Containers[0]
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// Every document of every value set is an object the Kubernetes API
// knows, field by field, and passes the checks an API server makes on
// what the chart sets: names, labels, a selector that selects the pod
// template, ports and variable names.
func TestRenderedManifestsDecodeStrictly(t *testing.T) {
	sets := map[string][]string{
		"sqlite":            sqlite,
		"postgres":          postgres,
		"postgres from url": postgresFromURL,
		"everything set": {
			"adminKey.existingSecret=hub-admin", "persistence.storageClassName=fast", "persistence.size=1Gi",
			"env.EDGEHUB_RETENTION_AGE=72h", "env.EDGEHUB_MAX_BODY=2097152", "env.EDGEHUB_ACCESS_LOG=true",
			"resources.limits.memory=1Gi", "resources.requests.cpu=250m",
			"podAnnotations.a=b", "podLabels.team=x", "nodeSelector.disk=ssd",
			"tolerations[0].key=k", "tolerations[0].operator=Exists",
			"imagePullSecrets[0].name=registry", "service.port=9000",
		},
	}
	for name, set := range sets {
		t.Run(name, func(t *testing.T) {
			objects := render(t, set...)
			kinds := map[string]int{}
			for _, o := range objects {
				kinds[o.GetObjectKind().GroupVersionKind().Kind]++
				if errs := apiChecks(o); len(errs) > 0 {
					t.Errorf("%s: %v", o.GetObjectKind().GroupVersionKind().Kind, errs.ToAggregate())
				}
			}
			if kinds["Service"] != 1 || kinds["StatefulSet"]+kinds["Deployment"] != 1 {
				t.Errorf("rendered %v, want one Service and one workload", kinds)
			}
		})
	}
}

// The decode refuses what a broken chart would render: this test keeps
// the check itself honest.
func TestStrictDecodingRefusesUnknownFieldsAndKinds(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 80}], selecter: {a: b}}\n",
		"unknown kind":  "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
		"unknown group": "apiVersion: apps/v2\nkind: Deployment\nmetadata: {name: x}\n",
		"removed API":   "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: x}\n",
		"deprecated":    "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: x}\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: eighty}]}\n",
		"duplicate key": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
	} {
		if _, err := decodeStrictly([]byte(doc)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// apiChecks are the API server's checks of the fields the chart sets,
// as apimachinery exports them.
func apiChecks(o runtime.Object) field.ErrorList {
	var errs field.ErrorList
	meta, ok := o.(metav1.Object)
	if !ok {
		return field.ErrorList{field.InternalError(nil, errors.New("no metadata"))}
	}
	for _, msg := range k8svalidation.IsDNS1123Label(meta.GetName()) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), meta.GetName(), msg))
	}
	errs = append(errs, validation.ValidateLabels(meta.GetLabels(), field.NewPath("metadata", "labels"))...)
	var selector *metav1.LabelSelector
	var pod *corev1.PodTemplateSpec
	switch w := o.(type) {
	case *appsv1.StatefulSet:
		selector, pod = w.Spec.Selector, &w.Spec.Template
		if w.Spec.ServiceName == "" {
			errs = append(errs, field.Required(field.NewPath("spec", "serviceName"), ""))
		}
		for i, c := range w.Spec.VolumeClaimTemplates {
			path := field.NewPath("spec", "volumeClaimTemplates").Index(i)
			size, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
			if !ok || size.Cmp(resource.MustParse("0")) <= 0 {
				errs = append(errs, field.Required(path.Child("spec", "resources", "requests", "storage"), ""))
			}
			if len(c.Spec.AccessModes) == 0 {
				errs = append(errs, field.Required(path.Child("spec", "accessModes"), ""))
			}
		}
	case *appsv1.Deployment:
		selector, pod = w.Spec.Selector, &w.Spec.Template
	case *corev1.Service:
		for i, p := range w.Spec.Ports {
			path := field.NewPath("spec", "ports").Index(i)
			if p.Port < 1 || p.Port > 65535 {
				errs = append(errs, field.Invalid(path.Child("port"), p.Port, "not a port"))
			}
			if p.TargetPort.Type == intstr.String {
				for _, msg := range k8svalidation.IsValidPortName(p.TargetPort.StrVal) {
					errs = append(errs, field.Invalid(path.Child("targetPort"), p.TargetPort.StrVal, msg))
				}
			}
		}
	}
	if pod == nil {
		return errs
	}
	if selector == nil || len(selector.MatchLabels) == 0 {
		return append(errs, field.Required(field.NewPath("spec", "selector"), ""))
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return append(errs, field.Invalid(field.NewPath("spec", "selector"), selector, err.Error()))
	}
	if !s.Matches(labels.Set(pod.Labels)) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "template", "metadata", "labels"), pod.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, validation.ValidateLabels(pod.Labels, field.NewPath("spec", "template", "metadata", "labels"))...)
	for _, c := range pod.Spec.Containers {
		path := field.NewPath("spec", "template", "spec", "containers").Key(c.Name)
		if c.Image == "" || strings.HasSuffix(c.Image, ":") {
			errs = append(errs, field.Invalid(path.Child("image"), c.Image, "no image or no tag"))
		}
		for _, p := range c.Ports {
			for _, msg := range k8svalidation.IsValidPortName(p.Name) {
				errs = append(errs, field.Invalid(path.Child("ports"), p.Name, msg))
			}
		}
		for _, e := range c.Env {
			for _, msg := range k8svalidation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(path.Child("env"), e.Name, msg))
			}
		}
	}
	return errs
}

// SQLite mode, the default: exactly one server, as a StatefulSet whose
// claim template gives it the volume that holds the backlog at /data.
func TestSQLiteModeIsOneServerWithItsVolume(t *testing.T) {
	objects := render(t, append(sqlite, "persistence.size=5Gi")...)
	kind, replicas, pod := workload(t, objects)
	if kind != "StatefulSet" || replicas != 1 {
		t.Fatalf("%s of %d replicas, want a StatefulSet of 1", kind, replicas)
	}
	set := ofType[*appsv1.StatefulSet](objects)[0]
	if len(set.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates, want 1", len(set.Spec.VolumeClaimTemplates))
	}
	claim := set.Spec.VolumeClaimTemplates[0]
	if got := claim.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("5Gi")) != 0 {
		t.Errorf("the claim asks for %s, want persistence.size 5Gi", got.String())
	}
	c := container(t, pod)
	data, ok := env(c, "EDGEHUB_DATA")
	if !ok || data.Value == "" {
		t.Fatal("EDGEHUB_DATA is not set")
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == claim.Name && m.MountPath == data.Value && !m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the claim %q is not mounted writable at EDGEHUB_DATA %s: %+v", claim.Name, data.Value, c.VolumeMounts)
	}
	if _, ok := env(c, "EDGEHUB_STORE"); ok {
		t.Error("EDGEHUB_STORE is set in SQLite mode")
	}
	if n := len(ofType[*corev1.PersistentVolumeClaim](objects)); n != 0 {
		t.Errorf("%d PersistentVolumeClaims beside the claim template", n)
	}
}

// Several servers on one SQLite file would break the one-server-per-data-
// directory rule: the chart refuses to render them, saying why, and
// refuses the other values it cannot run safely.
func TestChartRefusesUnsafeValues(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"replicaCount=3"}, "without a PostgreSQL store"},
		{[]string{"replicaCount=2", "store.postgres.existingSecret="}, "only one server may hold"},
		{[]string{"replicaCount=0"}, "replicaCount must be at least 1"},
		{[]string{"store.postgres.url=mysql://db/edgehub"}, "must be a postgres:// or postgresql:// URL"},
		{[]string{"env.EDGEHUB_ADMIN_KEY=plain"}, "env.EDGEHUB_ADMIN_KEY is the chart's to set"},
		{[]string{"env.EDGEHUB_STORE=postgres://db/edgehub"}, "env.EDGEHUB_STORE is the chart's to set"},
	} {
		out, err := helmTemplate(t, c.set...)
		if err == nil {
			t.Errorf("--set %s rendered:\n%s", strings.Join(c.set, ","), out)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error saying %q", strings.Join(c.set, ","), err, c.want)
		}
	}
	// One replica on SQLite, and several on PostgreSQL, render.
	if _, err := helmTemplate(t, "replicaCount=1"); err != nil {
		t.Error(err)
	}
}

// PostgreSQL mode: replicaCount servers as a Deployment, the store URL
// from a Secret's key, and no data volume (the backlog is the
// database's).
func TestPostgresModeRunsReplicasOnAURLFromASecret(t *testing.T) {
	for name, c := range map[string]struct {
		set          []string
		replicas     int32
		secret, key  string
		chartsSecret bool
	}{
		"existing secret": {postgres, 3, "edgehub-store", "dsn", false},
		"url value":       {postgresFromURL, 2, "edgehub-store", "url", true},
	} {
		t.Run(name, func(t *testing.T) {
			objects := render(t, c.set...)
			kind, replicas, pod := workload(t, objects)
			if kind != "Deployment" || replicas != c.replicas {
				t.Fatalf("%s of %d replicas, want a Deployment of %d", kind, replicas, c.replicas)
			}
			ct := container(t, pod)
			fromSecret(t, ct, "EDGEHUB_STORE", c.secret, c.key)
			if _, ok := env(ct, "EDGEHUB_DATA"); ok {
				t.Error("EDGEHUB_DATA is set on PostgreSQL")
			}
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					t.Errorf("volume %s is a claim on PostgreSQL", v.Name)
				}
			}
			if n := len(ofType[*corev1.PersistentVolumeClaim](objects)); n != 0 {
				t.Errorf("%d PersistentVolumeClaims on PostgreSQL", n)
			}
			var made *corev1.Secret
			for _, s := range ofType[*corev1.Secret](objects) {
				if s.Name == c.secret {
					made = s
				}
			}
			switch {
			case c.chartsSecret && made == nil:
				t.Errorf("no Secret %s holds the URL", c.secret)
			case c.chartsSecret && string(made.Data[c.key]) != "postgres://edgehub:pw@db:5432/edgehub":
				t.Errorf("Secret %s holds %q", c.secret, made.Data[c.key])
			case !c.chartsSecret && made != nil:
				t.Errorf("the chart made the Secret %s that the user gave", c.secret)
			}
		})
	}
}

// The admin key reaches the server only through a Secret: the variable
// is a secretKeyRef in every mode, and no key given as a value appears
// anywhere in the pod.
func TestAdminKeyComesFromASecret(t *testing.T) {
	const given = "a-key-given-as-a-value"
	for name, c := range map[string]struct {
		set         []string
		secret, key string
		value       string // what the chart's Secret holds; "" for none
	}{
		"generated":       {sqlite, "edgehub-admin-key", "admin-key", "*"},
		"given value":     {[]string{"adminKey.value=" + given}, "edgehub-admin-key", "admin-key", given},
		"existing secret": {append(postgres, "adminKey.existingSecret=hub-admin", "adminKey.secretKey=key"), "hub-admin", "key", ""},
	} {
		t.Run(name, func(t *testing.T) {
			objects := render(t, c.set...)
			_, _, pod := workload(t, objects)
			ct := container(t, pod)
			fromSecret(t, ct, "EDGEHUB_ADMIN_KEY", c.secret, c.key)
			for _, a := range append(append([]string{}, ct.Command...), ct.Args...) {
				if strings.Contains(a, "admin-key") {
					t.Errorf("the command line holds %q", a)
				}
			}
			podYAML, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(podYAML), given) {
				t.Error("the pod template holds the admin key's value")
			}
			var made *corev1.Secret
			for _, s := range ofType[*corev1.Secret](objects) {
				if s.Name == c.secret {
					made = s
				}
			}
			switch {
			case c.value == "" && made != nil:
				t.Errorf("the chart made the Secret %s that the user gave", c.secret)
			case c.value != "" && made == nil:
				t.Fatalf("no Secret %s", c.secret)
			case c.value == "*" && len(made.Data[c.key]) < 32:
				t.Errorf("the generated key is %d bytes, want at least 32", len(made.Data[c.key]))
			case c.value != "" && c.value != "*" && string(made.Data[c.key]) != c.value:
				t.Errorf("Secret %s holds %q, want %q", c.secret, made.Data[c.key], c.value)
			}
			if made != nil && len(made.Data[c.key]) > 0 && strings.Contains(string(podYAML), string(made.Data[c.key])) {
				t.Error("the pod template holds the Secret's key")
			}
		})
	}
}

// Liveness asks /healthz and readiness /readyz, on the port the server
// listens on, which the Service targets; a startup probe on /healthz
// holds liveness back while the backlog opens.
func TestProbesAskHealthzAndReadyz(t *testing.T) {
	for name, set := range map[string][]string{"sqlite": sqlite, "postgres": postgres, "other port": {"service.port=9000"}} {
		t.Run(name, func(t *testing.T) {
			objects := render(t, set...)
			_, _, pod := workload(t, objects)
			c := container(t, pod)
			addr, _ := env(c, "EDGEHUB_ADDR")
			_, portText, _ := strings.Cut(addr.Value, ":")
			port, err := strconv.Atoi(portText)
			if err != nil {
				t.Fatalf("EDGEHUB_ADDR %q has no port", addr.Value)
			}
			named := map[string]int32{}
			for _, p := range c.Ports {
				named[p.Name] = p.ContainerPort
			}
			for probe, want := range map[string]struct {
				p    *corev1.Probe
				path string
			}{
				"liveness":  {c.LivenessProbe, "/healthz"},
				"readiness": {c.ReadinessProbe, "/readyz"},
				"startup":   {c.StartupProbe, "/healthz"},
			} {
				if want.p == nil || want.p.HTTPGet == nil {
					t.Errorf("no %s probe over HTTP", probe)
					continue
				}
				get := want.p.HTTPGet
				if get.Path != want.path {
					t.Errorf("the %s probe asks %s, want %s", probe, get.Path, want.path)
				}
				if p := get.Port; p.IntValue() != port && named[p.StrVal] != int32(port) {
					t.Errorf("the %s probe asks port %s, the server listens on %d", probe, p.String(), port)
				}
				if get.Scheme != "" && get.Scheme != corev1.URISchemeHTTP {
					t.Errorf("the %s probe uses %s", probe, get.Scheme)
				}
			}
			svc := ofType[*corev1.Service](objects)[0]
			for _, p := range svc.Spec.Ports {
				if tp := p.TargetPort; tp.IntValue() != port && named[tp.StrVal] != int32(port) {
					t.Errorf("the Service targets %s, the server listens on %d", tp.String(), port)
				}
			}
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(svc.Spec.Selector) == 0 {
				t.Errorf("the Service's selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
			}
		})
	}
}

// dockerfileUser is the USER uid:gid of the repository's Dockerfile.
func dockerfileUser(t *testing.T) (uid, gid int64) {
	t.Helper()
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER\s+(\d+):(\d+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile has no USER uid:gid line")
	}
	uid, _ = strconv.ParseInt(string(m[1]), 10, 64)
	gid, _ = strconv.ParseInt(string(m[2]), 10, 64)
	return uid, gid
}

// The pod runs as the Dockerfile's user, never root, with no privilege
// to gain, no capability, the runtime's seccomp profile and a read-only
// root: the only writable places are /tmp and, on SQLite, the data
// volume, which fsGroup makes the user's.
func TestPodRunsAsTheDockerfilesUserWithNothingWritableButItsVolumes(t *testing.T) {
	uid, gid := dockerfileUser(t)
	for name, set := range map[string][]string{"sqlite": sqlite, "postgres": postgres} {
		t.Run(name, func(t *testing.T) {
			_, _, pod := workload(t, render(t, set...))
			ps := pod.Spec.SecurityContext
			if ps == nil {
				t.Fatal("no pod securityContext")
			}
			want := map[string][2]any{
				"runAsNonRoot": {ptr(ps.RunAsNonRoot), true},
				"runAsUser":    {ptr(ps.RunAsUser), uid},
				"runAsGroup":   {ptr(ps.RunAsGroup), gid},
				"fsGroup":      {ptr(ps.FSGroup), gid},
			}
			c := container(t, pod)
			cs := c.SecurityContext
			if cs == nil {
				t.Fatal("no container securityContext")
			}
			want["allowPrivilegeEscalation"] = [2]any{ptr(cs.AllowPrivilegeEscalation), false}
			want["readOnlyRootFilesystem"] = [2]any{ptr(cs.ReadOnlyRootFilesystem), true}
			for field, v := range want {
				if !reflect.DeepEqual(v[0], v[1]) {
					t.Errorf("%s is %v, want %v", field, v[0], v[1])
				}
			}
			if cs.RunAsUser != nil && *cs.RunAsUser != uid || cs.Privileged != nil && *cs.Privileged {
				t.Error("the container overrides the pod's user or is privileged")
			}
			if cs.Capabilities == nil || !reflect.DeepEqual(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 {
				t.Errorf("capabilities %+v, want drop ALL and no add", cs.Capabilities)
			}
			seccomp := ps.SeccompProfile
			if cs.SeccompProfile != nil {
				seccomp = cs.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccomp profile %+v, want RuntimeDefault", seccomp)
			}
			if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
				t.Error("the pod mounts a service account token it has no use for")
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Spec.Volumes {
				volumes[v.Name] = v
			}
			tmp := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/tmp" && !m.ReadOnly && volumes[m.Name].EmptyDir != nil {
					tmp = true
				}
			}
			if !tmp {
				t.Errorf("no writable emptyDir at /tmp on the read-only root: %+v", c.VolumeMounts)
			}
		})
	}
}

func ptr[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// serverShutdown is the time cmd/edgehub gives a stop to end its
// streams and commits, read from its source.
func serverShutdown(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../../../cmd/edgehub/serve.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"shutting down"\)\s+sctx, cancel := context\.WithTimeout\(context\.Background\(\), (\d+)\*time\.Second\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("cmd/edgehub/serve.go no longer says how long a shutdown takes: read it and fix this test")
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// A stop gets more time than the server's own shutdown takes, so the
// kubelet's SIGKILL never cuts a stream mid-frame or a commit short.
func TestGracePeriodOutlastsTheServersShutdown(t *testing.T) {
	shutdown := serverShutdown(t)
	for name, set := range map[string][]string{"sqlite": sqlite, "postgres": postgres} {
		t.Run(name, func(t *testing.T) {
			_, _, pod := workload(t, render(t, set...))
			// A preStop hook runs before SIGTERM, inside the same grace.
			var preStop int64
			if l := container(t, pod).Lifecycle; l != nil && l.PreStop != nil {
				if l.PreStop.Sleep == nil {
					t.Fatal("a preStop hook of unknown length")
				}
				preStop = l.PreStop.Sleep.Seconds
			}
			grace := pod.Spec.TerminationGracePeriodSeconds
			if grace == nil || *grace <= shutdown+preStop {
				t.Errorf("terminationGracePeriodSeconds %v, want more than the server's %d s (and a preStop's %d s)", ptr(grace), shutdown, preStop)
			}
		})
	}
}

// Settings in env reach the server as written in a values file, where
// YAML reads every number as a float: 2097152 stays 2097152, not
// 2.097152e+06, which the server would refuse.
func TestEnvSettingsReachTheServerAsWritten(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	err := os.WriteFile(values, []byte("env:\n  EDGEHUB_MAX_BODY: 2097152\n  EDGEHUB_MAX_TENANT_BYTES: 10737418240\n"+
		"  EDGEHUB_TENANT_SHARE: 0.5\n  EDGEHUB_ACCESS_LOG: true\n  EDGEHUB_RETENTION_AGE: 72h\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	out, err := helmTemplateArgs(t, "--values", values)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := decodeStrictly(out)
	if err != nil {
		t.Fatal(err)
	}
	_, _, pod := workload(t, objects)
	c := container(t, pod)
	for name, want := range map[string]string{
		"EDGEHUB_MAX_BODY": "2097152", "EDGEHUB_MAX_TENANT_BYTES": "10737418240",
		"EDGEHUB_TENANT_SHARE": "0.5", "EDGEHUB_ACCESS_LOG": "true", "EDGEHUB_RETENTION_AGE": "72h",
	} {
		if e, _ := env(c, name); e.Value != want {
			t.Errorf("%s is %q, want %q", name, e.Value, want)
		}
	}
}
