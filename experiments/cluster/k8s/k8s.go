// Package k8s writes a sweep's trials as a Kubernetes Indexed Job: one
// completion per trial bundle, the bundle picked by the pod's completion
// index, at most one trial pod per node (anti-affinity on the Job's
// label: a faithful trial needs the machine to itself), privileged in a
// network namespace of its own (fabric builds the lab's namespaces inside
// it), bundles and results on a PersistentVolumeClaim every node mounts;
// and a merge Job that waits for every trial to end and writes the
// report. The manifests are built from the API's own types, so a field
// the API does not have cannot be written.
package k8s

import (
	"bytes"
	"fmt"
	"path"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fabric-emu/fabric/experiments/cluster"
)

// Job is what the manifests need.
type Job struct {
	// Prefix names the Jobs and is their fabric.run label.
	Prefix    string
	Namespace string
	// Image is the fabric image (FROM scratch plus the static binary, at
	// /fabric: fabric image build), Fabric the binary's path in it.
	Image  string
	Fabric string
	// Volume is the PersistentVolumeClaim holding the shared directory,
	// mounted at Mount in every pod.
	Volume string
	Mount  string
	// Count is how many trials; Parallelism how many run at once (at
	// most one per node).
	Count       int
	Parallelism int
	// Pick lists the bundles to run when not all of them: completion i
	// runs bundle Pick[i] (a resubmission).
	Pick []int
	// Deadline bounds each Job's run (activeDeadlineSeconds; 0: none), so
	// that the merge Job ends even when a trial pod died without a word.
	Deadline time.Duration
}

// Label is the label key every object of a sweep carries.
const Label = "fabric.run"

// trialName is the trial Job's name.
func (j Job) trialName() string { return j.Prefix + "-trials" }

// Trials is the Indexed Job of the trials.
func (j Job) Trials() *batchv1.Job {
	d := cluster.Dir(j.Mount)
	args := []string{"trial", d.Bundles(), "--index", "$(JOB_COMPLETION_INDEX)", "--out", d.Results()}
	completions := int32(j.Count)
	if j.Pick != nil {
		args = append(args, "--pick", cluster.IndexList(j.Pick))
		completions = int32(len(j.Pick))
	}
	par := int32(max(1, min(j.Parallelism, int(completions))))
	mode := batchv1.IndexedCompletion
	// Each index fails alone, at once: a failed trial says why in its
	// INCOMPLETE, and fabric cluster status --resubmit runs it again.
	perIndex := int32(0)
	labels := map[string]string{Label: j.Prefix, "fabric.role": "trial"}
	pod := j.pod(labels, args)
	pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
			TopologyKey:   "kubernetes.io/hostname",
		}},
	}}
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: j.trialName(), Namespace: j.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode: &mode, Completions: &completions, Parallelism: &par, BackoffLimitPerIndex: &perIndex,
			ActiveDeadlineSeconds: j.deadline(), Template: pod,
		},
	}
}

// Merge is the Job that waits for every trial to end and merges the
// report (fabric cluster merge --wait: the API has no dependency between
// Jobs, and the shared directory says when the trials are over).
func (j Job) Merge() *batchv1.Job {
	labels := map[string]string{Label: j.Prefix, "fabric.role": "report"}
	one := int32(1)
	backoff := int32(2)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Prefix + "-report", Namespace: j.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			Completions: &one, Parallelism: &one, BackoffLimit: &backoff, ActiveDeadlineSeconds: j.deadline(),
			Template: j.pod(labels, []string{"cluster", "merge", j.Mount, "--wait"}),
		},
	}
}

// deadline is the Jobs' activeDeadlineSeconds, nil for none.
func (j Job) deadline() *int64 {
	if j.Deadline <= 0 {
		return nil
	}
	s := int64(j.Deadline.Seconds())
	return &s
}

// pod is a pod of the sweep running fabric with args. Besides the shared
// volume it mounts the node's BPF filesystem, where fabric pins its port
// programs' maps (a container's /sys has none mounted).
func (j Job) pod(labels map[string]string, args []string) corev1.PodTemplateSpec {
	privileged := true
	bpffs := corev1.HostPathDirectoryOrCreate
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			HostNetwork:   false, // the lab's namespaces are made inside the pod's own
			Containers: []corev1.Container{{
				Name: "fabric", Image: j.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{j.Fabric}, Args: args,
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
				VolumeMounts:    []corev1.VolumeMount{{Name: "shared", MountPath: j.Mount}, {Name: "bpffs", MountPath: "/sys/fs/bpf"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "shared", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: j.Volume},
				}},
				{Name: "bpffs", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/bpf", Type: &bpffs}}},
			},
		},
	}
}

// Manifest is both Jobs as one YAML stream.
func (j Job) Manifest() ([]byte, error) {
	var b bytes.Buffer
	for i, obj := range []*batchv1.Job{j.Trials(), j.Merge()} {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, "# %s\n", []string{"the trials: one completion per bundle", "the report, once every trial has ended"}[i])
		b.Write(y)
	}
	return b.Bytes(), nil
}

// FileName is the manifest's name in the shared directory.
const FileName = "k8s.yaml"

// DefaultFabric is the binary's path in fabric's image.
var DefaultFabric = path.Join("/", "fabric")
