package k8s

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decode decodes the manifest's documents strictly into Jobs: a field the
// API types do not have fails.
func decode(t *testing.T, manifest []byte) []batchv1.Job {
	t.Helper()
	var jobs []batchv1.Job
	for _, doc := range bytes.Split(manifest, []byte("\n---\n")) {
		var j batchv1.Job
		if err := yaml.UnmarshalStrict(doc, &j); err != nil {
			t.Fatalf("strict decode: %v\n%s", err, doc)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

func TestManifestDecodesStrictly(t *testing.T) {
	job := Job{Prefix: "fabric-hull", Namespace: "lab", Image: "registry.example/fabric:v1", Fabric: DefaultFabric,
		Volume: "fabric-shared", Mount: "/shared", Count: 36, Parallelism: 4, Deadline: 6 * time.Hour}
	m, err := job.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("manifest:\n%s", m)
	jobs := decode(t, m)
	if len(jobs) != 2 {
		t.Fatalf("%d Jobs, want the trials' and the report's", len(jobs))
	}
	tr, merge := jobs[0], jobs[1]
	s := tr.Spec
	if tr.Kind != "Job" || tr.APIVersion != "batch/v1" || tr.Name != "fabric-hull-trials" || tr.Namespace != "lab" || tr.Labels[Label] != "fabric-hull" {
		t.Errorf("trials Job: %s %s %s/%s labels %v", tr.APIVersion, tr.Kind, tr.Namespace, tr.Name, tr.Labels)
	}
	if s.BackoffLimitPerIndex == nil || *s.BackoffLimitPerIndex != 0 || s.BackoffLimit != nil {
		t.Errorf("backoff limit per index %v, global %v: want each index to fail alone", s.BackoffLimitPerIndex, s.BackoffLimit)
	}
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || *s.Completions != 36 || *s.Parallelism != 4 {
		t.Errorf("completion mode %v, completions %d, parallelism %d; want Indexed, 36, 4", s.CompletionMode, *s.Completions, *s.Parallelism)
	}
	pod := s.Template.Spec
	if pod.HostNetwork || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("hostNetwork %v, restartPolicy %s", pod.HostNetwork, pod.RestartPolicy)
	}
	c := pod.Containers[0]
	if c.Image != job.Image || c.SecurityContext == nil || !*c.SecurityContext.Privileged || c.Command[0] != "/fabric" {
		t.Errorf("container: image %s, privileged %v, command %v", c.Image, c.SecurityContext, c.Command)
	}
	want := []string{"trial", "/shared/bundles", "--index", "$(JOB_COMPLETION_INDEX)", "--out", "/shared/results"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/shared" || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "fabric-shared" ||
		pod.Volumes[0].Name != c.VolumeMounts[0].Name {
		t.Errorf("volume %+v mounted as %+v", pod.Volumes, c.VolumeMounts)
	}
	if hp := pod.Volumes[1].HostPath; hp == nil || hp.Path != "/sys/fs/bpf" || c.VolumeMounts[1].MountPath != "/sys/fs/bpf" || c.VolumeMounts[1].Name != pod.Volumes[1].Name {
		t.Errorf("the node's BPF filesystem: volume %+v mounted as %+v", pod.Volumes[1], c.VolumeMounts[1])
	}
	for _, j := range jobs {
		if d := j.Spec.ActiveDeadlineSeconds; d == nil || *d != 6*3600 {
			t.Errorf("%s: activeDeadlineSeconds %v, want 21600", j.Name, d)
		}
	}
	aa := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(aa) != 1 || aa[0].TopologyKey != "kubernetes.io/hostname" {
		t.Fatalf("anti-affinity %+v: want one term per node", aa)
	}
	for k, v := range aa[0].LabelSelector.MatchLabels {
		if s.Template.Labels[k] != v {
			t.Errorf("anti-affinity selects %s=%s, which the trial pods do not carry (%v)", k, v, s.Template.Labels)
		}
	}
	mc := merge.Spec.Template.Spec.Containers[0]
	if merge.Name != "fabric-hull-report" || !slices.Equal(mc.Args, []string{"cluster", "merge", "/shared", "--wait"}) || merge.Labels[Label] != "fabric-hull" {
		t.Errorf("merge Job %s: args %q labels %v", merge.Name, mc.Args, merge.Labels)
	}
}

// A resubmission's completions pick the missing bundles.
func TestManifestPicks(t *testing.T) {
	job := Job{Prefix: "p-r2", Image: "img", Fabric: DefaultFabric, Volume: "v", Mount: "/s", Pick: []int{3, 7, 9}, Parallelism: 8}
	m, err := job.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	tr := decode(t, m)[0]
	if *tr.Spec.Completions != 3 || *tr.Spec.Parallelism != 3 {
		t.Errorf("completions %d parallelism %d, want 3 and 3", *tr.Spec.Completions, *tr.Spec.Parallelism)
	}
	if args := strings.Join(tr.Spec.Template.Spec.Containers[0].Args, " "); !strings.HasSuffix(args, "--pick 3,7,9") {
		t.Errorf("args %q pick no bundles", args)
	}
}

// The strict decoder refuses a field the API does not have: the check
// above can fail.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	var j batchv1.Job
	bad := []byte("apiVersion: batch/v1\nkind: Job\nspec:\n  completionMode: Indexed\n  completionz: 3\n")
	if err := yaml.UnmarshalStrict(bad, &j); err == nil {
		t.Error("an unknown field decoded")
	}
}
