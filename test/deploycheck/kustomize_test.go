package deploycheck

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// k8sDir is the kustomize base, relative to the repository root.
const k8sDir = "deploy/k8s"

// newObject maps each apiVersion/kind that the base may contain to its typed
// Kubernetes API struct. Anything else is a problem.
var newObject = map[string]func() any{
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                           func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// workloads are the pod-running objects that the base must contain.
var workloads = []struct {
	kind, name string
	args       []string
}{
	{"Deployment", "converge-api", []string{"api"}},
	{"Deployment", "converge-worker", []string{"worker"}},
	{"Job", "converge-migrate", []string{"migrate", "up"}},
}

// k8sObjects is the kustomize build of the base, decoded.
type k8sObjects struct {
	deployments     map[string]*appsv1.Deployment
	jobs            map[string]*batchv1.Job
	services        map[string]*corev1.Service
	serviceAccounts map[string]*corev1.ServiceAccount
	configMaps      map[string]*corev1.ConfigMap
	pdbs            map[string]*policyv1.PodDisruptionBudget
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
}

// diskFS copies the base from the repository into an in-memory file system, so that
// tests can break copies of it, and returns that file system.
func diskFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), k8sDir))
	if err != nil {
		t.Fatalf("read %s: %v", k8sDir, err)
	}
	fSys := filesys.MakeFsInMemory()
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := path.Join("/", k8sDir, e.Name())
		if err := fSys.WriteFile(name, []byte(readFile(t, path.Join(k8sDir, e.Name())))); err != nil {
			t.Fatalf("copy %s: %v", name, err)
		}
	}
	return fSys
}

// kustomizeBuild runs kustomize on the base in fSys and decodes each object strictly
// (unknown or misspelt fields are errors) into its typed struct.
func kustomizeBuild(fSys filesys.FileSystem) (*k8sObjects, []string) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fSys, path.Join("/", k8sDir))
	if err != nil {
		return nil, []string{fmt.Sprintf("kustomize build: %v", err)}
	}
	objs := &k8sObjects{
		deployments:     map[string]*appsv1.Deployment{},
		jobs:            map[string]*batchv1.Job{},
		services:        map[string]*corev1.Service{},
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		configMaps:      map[string]*corev1.ConfigMap{},
		pdbs:            map[string]*policyv1.PodDisruptionBudget{},
		hpas:            map[string]*autoscalingv2.HorizontalPodAutoscaler{},
	}
	var problems []string
	for _, r := range resMap.Resources() {
		gvk := r.GetApiVersion() + "/" + r.GetKind()
		id := gvk + " " + r.GetName()
		if r.GetKind() == "Secret" {
			problems = append(problems, fmt.Sprintf("%s: the build contains a Secret; credentials must be created out of band", id))
			continue
		}
		newObj, ok := newObject[gvk]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: unexpected apiVersion/kind", id))
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			problems = append(problems, fmt.Sprintf("%s: does not decode strictly: %v", id, err))
			continue
		}
		meta := obj.(metav1.Object)
		if meta.GetName() == "" {
			problems = append(problems, fmt.Sprintf("%s: no metadata.name", id))
		}
		if meta.GetLabels()["app.kubernetes.io/part-of"] != "converge" {
			problems = append(problems, fmt.Sprintf("%s: no app.kubernetes.io/part-of=converge label", id))
		}
		var dup bool
		switch o := obj.(type) {
		case *appsv1.Deployment:
			dup = put(objs.deployments, o.Name, o)
		case *batchv1.Job:
			dup = put(objs.jobs, o.Name, o)
		case *corev1.Service:
			dup = put(objs.services, o.Name, o)
		case *corev1.ServiceAccount:
			dup = put(objs.serviceAccounts, o.Name, o)
		case *corev1.ConfigMap:
			dup = put(objs.configMaps, o.Name, o)
		case *policyv1.PodDisruptionBudget:
			dup = put(objs.pdbs, o.Name, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			dup = put(objs.hpas, o.Name, o)
		}
		if dup {
			problems = append(problems, fmt.Sprintf("%s: duplicate name", id))
		}
	}
	return objs, problems
}

// put adds v to m under name and reports whether name was taken.
func put[T any](m map[string]T, name string, v T) bool {
	_, taken := m[name]
	m[name] = v
	return taken
}

// exampleSecret decodes the example Secret that the workloads' secretKeyRefs name.
func exampleSecret(fSys filesys.FileSystem) (*corev1.Secret, error) {
	data, err := fSys.ReadFile(path.Join("/", k8sDir, "secret.example.yaml"))
	if err != nil {
		return nil, err
	}
	var s corev1.Secret
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("secret.example.yaml: %w", err)
	}
	if s.Kind != "Secret" || s.APIVersion != "v1" || s.Name == "" {
		return nil, fmt.Errorf("secret.example.yaml is not a named v1 Secret")
	}
	return &s, nil
}

// selects reports whether the selector sel selects pods labelled podLabels.
func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

// portIn reports whether p (a number or a port name) names a port of containers.
func portIn(p intstr.IntOrString, containers []corev1.Container) bool {
	for _, c := range containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
				return true
			}
		}
	}
	return false
}

// checkK8s returns what is wrong with the built base objs, given the example Secret
// and the user id of the image (from the Dockerfile).
func checkK8s(objs *k8sObjects, secret *corev1.Secret, uid int) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	pods := map[string]*corev1.PodTemplateSpec{}
	for _, w := range workloads {
		var tmpl *corev1.PodTemplateSpec
		switch w.kind {
		case "Deployment":
			d, ok := objs.deployments[w.name]
			if !ok {
				add("no Deployment %s", w.name)
				continue
			}
			tmpl = &d.Spec.Template
			if !selects(d.Spec.Selector, tmpl.Labels) {
				add("Deployment %s: its selector does not select its own pod template", w.name)
			}
		case "Job":
			j, ok := objs.jobs[w.name]
			if !ok {
				add("no Job %s", w.name)
				continue
			}
			tmpl = &j.Spec.Template
			if rp := tmpl.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
				add("Job %s: restartPolicy %q", w.name, rp)
			}
			if j.Spec.BackoffLimit == nil {
				add("Job %s: no backoffLimit", w.name)
			}
		}
		pods[w.name] = tmpl
		problems = append(problems, checkPod(objs, secret, uid, w.kind+" "+w.name, tmpl.Spec, w.kind == "Deployment", w.args)...)
	}
	if len(objs.deployments) != 2 || len(objs.jobs) != 1 {
		add("want exactly the api and worker Deployments and the migrate Job, got %d Deployments and %d Jobs", len(objs.deployments), len(objs.jobs))
	}

	// matching returns the Deployments whose pods sel selects.
	matching := func(sel *metav1.LabelSelector) []string {
		var names []string
		for name, d := range objs.deployments {
			if selects(sel, d.Spec.Template.Labels) {
				names = append(names, name)
			}
		}
		return names
	}

	// Services select exactly one Deployment and target its ports.
	if _, ok := objs.services["converge-api"]; !ok {
		add("no Service converge-api")
	}
	for name, s := range objs.services {
		targets := matching(&metav1.LabelSelector{MatchLabels: s.Spec.Selector})
		if len(targets) != 1 {
			add("Service %s selects %d Deployments %v, want one", name, len(targets), targets)
			continue
		}
		if len(s.Spec.Ports) == 0 {
			add("Service %s has no ports", name)
		}
		for _, p := range s.Spec.Ports {
			if !portIn(p.TargetPort, objs.deployments[targets[0]].Spec.Template.Spec.Containers) {
				add("Service %s: targetPort %s is no port of Deployment %s", name, p.TargetPort.String(), targets[0])
			}
		}
	}

	// PodDisruptionBudgets: one per Deployment that they name, the worker's included.
	pdbFor := map[string]bool{}
	for name, pdb := range objs.pdbs {
		targets := matching(pdb.Spec.Selector)
		if len(targets) != 1 {
			add("PodDisruptionBudget %s selects %d Deployments %v, want one", name, len(targets), targets)
			continue
		}
		pdbFor[targets[0]] = true
		if pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
			add("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", name)
		}
	}
	if !pdbFor["converge-worker"] {
		add("no PodDisruptionBudget selects the converge-worker pods")
	}

	// The HPA scales the worker Deployment on CPU, and owns its replica count.
	var workerHPA bool
	for name, h := range objs.hpas {
		ref := h.Spec.ScaleTargetRef
		d, ok := objs.deployments[ref.Name]
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || !ok {
			add("HPA %s targets %s %s %s, which is not a Deployment of the base", name, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		workerHPA = workerHPA || ref.Name == "converge-worker"
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
			add("HPA %s: want minReplicas >= 2 and maxReplicas >= minReplicas", name)
		}
		cpu := false
		for _, m := range h.Spec.Metrics {
			if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
				m.Resource.Target.Type == autoscalingv2.UtilizationMetricType && m.Resource.Target.AverageUtilization != nil {
				cpu = true
			}
		}
		if !cpu {
			add("HPA %s does not scale on CPU utilization", name)
		}
		if d.Spec.Replicas != nil {
			add("Deployment %s sets replicas although HPA %s owns them: every apply would reset the count", ref.Name, name)
		}
	}
	if !workerHPA {
		add("no HPA targets the converge-worker Deployment")
	}
	return problems
}

// checkPod returns what is wrong with the pod spec of the workload named owner.
func checkPod(objs *k8sObjects, secret *corev1.Secret, uid int, owner string, spec corev1.PodSpec, long bool, args []string) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, owner+": "+fmt.Sprintf(format, a...)) }

	if sa := spec.ServiceAccountName; sa != "" {
		if _, ok := objs.serviceAccounts[sa]; !ok {
			add("serviceAccountName %s is not in the base", sa)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		add("mounts a service account token it does not need")
	}
	podSC := spec.SecurityContext
	if podSC == nil {
		podSC = &corev1.PodSecurityContext{}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		if v.ConfigMap != nil {
			if _, ok := objs.configMaps[v.ConfigMap.Name]; !ok {
				add("volume %s: ConfigMap %s is not in the base", v.Name, v.ConfigMap.Name)
			}
		}
	}
	if len(spec.Containers) != 1 {
		add("%d containers, want 1", len(spec.Containers))
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		add := func(format string, a ...any) { add("container %s: "+format, append([]any{c.Name}, a...)...) }
		if c.Image == "" || !(strings.Contains(c.Image[strings.LastIndex(c.Image, "/")+1:], ":") || strings.Contains(c.Image, "@")) {
			add("image %q has no tag or digest", c.Image)
		}
		if !slices.Equal(c.Args, args) {
			add("args %q, want %q", c.Args, args)
		}

		// Resources: requests and limits for CPU and memory, requests within limits.
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			lim, hasLim := c.Resources.Limits[res]
			switch {
			case !hasReq || req.IsZero():
				add("no %s request", res)
			case !hasLim || lim.IsZero():
				add("no %s limit", res)
			case req.Cmp(lim) > 0:
				add("%s request %s above limit %s", res, req.String(), lim.String())
			}
		}

		// Security: non-root (the image's user), read-only root, no escalation.
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = podSC.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			add("runAsNonRoot is not true")
		}
		runAs := sc.RunAsUser
		if runAs == nil {
			runAs = podSC.RunAsUser
		}
		if runAs == nil || *runAs != int64(uid) {
			add("runAsUser is not the image's user %d", uid)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			add("does not drop ALL capabilities")
		}

		// Probes: readiness on /readyz and liveness on /healthz, on a declared port.
		if long {
			for _, p := range []struct {
				name, path string
				probe      *corev1.Probe
			}{
				{"readiness", "/readyz", c.ReadinessProbe},
				{"liveness", "/healthz", c.LivenessProbe},
			} {
				switch {
				case p.probe == nil || p.probe.HTTPGet == nil:
					add("no HTTP %s probe", p.name)
				case p.probe.HTTPGet.Path != p.path:
					add("%s probe on %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
				case !portIn(p.probe.HTTPGet.Port, []corev1.Container{c}):
					add("%s probe port %s is not a container port", p.name, p.probe.HTTPGet.Port.String())
				}
			}
		}

		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m
			if _, ok := volumes[m.Name]; !ok {
				add("volumeMount %s names no volume", m.Name)
			}
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			_, inData := secret.Data[ref.Key]
			_, inStringData := secret.StringData[ref.Key]
			if ref.Name != secret.Name || !(inData || inStringData) {
				add("env %s: secretKeyRef %s/%s is not in secret.example.yaml (%s)", e.Name, ref.Name, ref.Key, secret.Name)
			}
		}
		if e, ok := env["DATABASE_URL"]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			add("DATABASE_URL does not come from a secretKeyRef")
		}
		if e, ok := env["CONVERGE_ADMIN_TOKEN"]; ok && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			add("CONVERGE_ADMIN_TOKEN does not come from a secretKeyRef")
		}

		// CONVERGE_CONFIG names config.yaml in a mounted ConfigMap.
		configPath := env["CONVERGE_CONFIG"].Value
		m, mounted := mounts[path.Dir(configPath)]
		switch {
		case configPath == "":
			add("CONVERGE_CONFIG is not set")
		case !mounted || volumes[m.Name].ConfigMap == nil:
			add("CONVERGE_CONFIG %s is not in a mounted ConfigMap", configPath)
		default:
			cm := objs.configMaps[volumes[m.Name].ConfigMap.Name]
			data, ok := "", false
			if cm != nil {
				data, ok = cm.Data[path.Base(configPath)]
			}
			if !ok {
				add("CONVERGE_CONFIG %s: the ConfigMap has no key %s", configPath, path.Base(configPath))
			} else {
				_, cfgProblems := checkConvergeConfig([]byte(data))
				for _, p := range cfgProblems {
					add("%s", p)
				}
			}
		}

		// Long-running processes listen where the probes and the Service reach them.
		if long {
			host, port, err := net.SplitHostPort(env["CONVERGE_LISTEN"].Value)
			n, _ := strconv.Atoi(port)
			if err != nil || host != "0.0.0.0" || !portIn(intstr.FromInt32(int32(n)), []corev1.Container{c}) {
				add("CONVERGE_LISTEN %q is not 0.0.0.0 on a container port", env["CONVERGE_LISTEN"].Value)
			}
		}
	}
	return problems
}

func TestKustomizeBase(t *testing.T) {
	t.Parallel()
	fSys := diskFS(t)
	secret, err := exampleSecret(fSys)
	if err != nil {
		t.Fatal(err)
	}
	objs, problems := kustomizeBuild(fSys)
	if objs == nil {
		reportProblems(t, problems)
		t.FailNow()
	}
	problems = append(problems, checkK8s(objs, secret, dockerfileUID(readFile(t, "deploy/Dockerfile")))...)
	reportProblems(t, problems)

	// The generated ConfigMap carries a content hash, and the pods mount it by that name.
	if len(objs.configMaps) != 1 {
		t.Errorf("%d ConfigMaps, want 1", len(objs.configMaps))
	}
	for name := range objs.configMaps {
		if !strings.HasPrefix(name, "converge-config-") {
			t.Errorf("ConfigMap %s has no content-hash suffix", name)
		}
	}
}

// TestKustomizeChecksFail shows that each check fails on a base that breaks it.
func TestKustomizeChecksFail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		file        string
		old, new    string
		wantProblem string
	}{
		{"readiness path", "api.yaml", "path: /readyz", "path: /ready", "readiness probe on /ready"},
		{"liveness path", "worker.yaml", "path: /healthz", "path: /health", "liveness probe on /health"},
		{"probe port", "api.yaml", "path: /healthz\n              port: http", "path: /healthz\n              port: metrics", "liveness probe port"},
		{"misspelt field", "api.yaml", "readinessProbe:", "readinesProbe:", "unknown field"},
		{"secret key", "migrate-job.yaml", "key: database-url", "key: db-url", "is not in secret.example.yaml"},
		{"secret name", "worker.yaml", "name: converge-secrets", "name: converge-secret", "is not in secret.example.yaml"},
		{"secret in build", "kustomization.yaml", "  - worker.yaml\n", "  - worker.yaml\n  - secret.example.yaml\n", "contains a Secret"},
		{"service selector", "api.yaml", "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: converge\n    app.kubernetes.io/component: api", "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: converge\n    app.kubernetes.io/component: apis", "Service converge-api selects 0"},
		{"service port", "api.yaml", "targetPort: http", "targetPort: web", "targetPort web"},
		{"hpa target", "worker.yaml", "    name: converge-worker\n  minReplicas", "    name: converge-workers\n  minReplicas", "HPA converge-worker targets"},
		{"hpa memory", "worker.yaml", "        name: cpu\n", "        name: memory\n", "CPU utilization"},
		{"worker replicas", "worker.yaml", "  revisionHistoryLimit: 5\n  selector:", "  replicas: 3\n  revisionHistoryLimit: 5\n  selector:", "owns them"},
		{"pdb selector", "worker.yaml", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: converge\n      app.kubernetes.io/component: worker", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: converge\n      app.kubernetes.io/component: workers", "PodDisruptionBudget converge-worker selects 0"},
		{"writable root", "api.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"root", "worker.yaml", "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot"},
		{"other uid", "migrate-job.yaml", "runAsUser: 65532", "runAsUser: 1000", "runAsUser"},
		{"no limits", "worker.yaml", "            limits:\n              cpu: \"2\"\n              memory: 512Mi\n", "", "no cpu limit"},
		{"request above limit", "migrate-job.yaml", "cpu: 50m", "cpu: 800m", "above limit"},
		{"worker args", "worker.yaml", `args: ["worker"]`, `args: ["serve"]`, `args ["serve"]`},
		{"loopback listen", "api.yaml", "value: 0.0.0.0:8080", "value: 127.0.0.1:8080", "CONVERGE_LISTEN"},
		{"config path", "api.yaml", "value: /etc/converge/config.yaml", "value: /etc/converge/converge.yaml", "has no key converge.yaml"},
		{"config key", "config.yaml", "max_attempts: 8", "max_attempt: 8", "converge config"},
		{"config unmounted", "worker.yaml", "            - name: config\n              mountPath: /etc/converge", "            - name: config\n              mountPath: /etc/config", "not in a mounted ConfigMap"},
		{"unknown kind", "serviceaccount.yaml", "apiVersion: v1\nkind: ServiceAccount", "apiVersion: v1beta1\nkind: ServiceAccount", "unexpected apiVersion/kind"},
	}
	uid := dockerfileUID(readFile(t, "deploy/Dockerfile"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fSys := diskFS(t)
			file := path.Join("/", k8sDir, tt.file)
			data, err := fSys.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := fSys.WriteFile(file, []byte(mustReplace(t, string(data), tt.old, tt.new))); err != nil {
				t.Fatal(err)
			}
			secret, err := exampleSecret(fSys)
			if err != nil {
				t.Fatal(err)
			}
			objs, problems := kustomizeBuild(fSys)
			if objs != nil {
				problems = append(problems, checkK8s(objs, secret, uid)...)
			}
			t.Logf("problems: %q", problems)
			if !problemsContain(problems, tt.wantProblem) {
				t.Errorf("problems %q, want one containing %q", problems, tt.wantProblem)
			}
		})
	}
}
