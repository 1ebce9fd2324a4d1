package stack

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pod network check that the lab (`lab up`'s cross-site check) and the e2e scenarios (every new Node)
// share: a busybox pod on a Node serves a known answer over HTTP, and a client pod on some Node fetches it
// by pod IP and pings it. A Node whose CNI state is wrong (a reused host's cni0 still carrying the previous
// Node's pod CIDR) fails it: its pods never start.

// AnswerPort is the port of an answer pod's HTTP server.
const AnswerPort = "8080"

// writeBig writes /www/big, BigFileBytes long, with the shell alone (the image has no dd).
var writeBig = fmt.Sprintf(`s=0123456789abcdef; i=0; while [ $i -lt %d ]; do s=$s$s; i=$((i+1)); done; printf %%s "$s" > /www/big`, bits.Len(BigFileBytes/16)-1)

// AnswerPod is a pod on node, in namespace default, that serves answer over HTTP on AnswerPort, and /big
// (BigFileBytes).
func AnswerPod(name, node, answer string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "busybox", Image: BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				// sh stays PID 1 with a TERM trap: httpd as PID 1 would ignore SIGTERM, and every node's
				// shutdown (the lab's `lab down`, a Machine's drain) waited for the stop grace period.
				Command: []string{"/bin/sh", "-c", fmt.Sprintf("trap 'exit 0' TERM INT; mkdir -p /www && echo %q > /www/index.html && %s && httpd -f -p %s -h /www & wait $!", answer, writeBig, AnswerPort)},
			}},
		},
	}
}

// StartAnswerPod creates pod (from AnswerPod), keeping one of the same name left from an earlier run.
func StartAnswerPod(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to create the pod %s on %s: %w", pod.Name, pod.Spec.NodeName, err)
	}
	return nil
}

// WaitPodIP waits until pod default/name runs with an address and returns it.
func WaitPodIP(ctx context.Context, c client.Client, name string, timeout time.Duration) (string, error) {
	pod := &corev1.Pod{}
	err := WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, pod); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("the pod %s on %s did not run in %s (phase %s, %s): %w", name, pod.Spec.NodeName, timeout, pod.Status.Phase, PodWaiting(pod), err)
	}
	return pod.Status.PodIP, nil
}

// PodWaiting says why a pod's containers wait, if they do.
func PodWaiting(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			return cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
		}
	}
	return "no container waiting"
}

// BigFileBytes is the size of /big, which every answer pod serves beside its answer: a transfer of many
// segments, where the answer is one.
const BigFileBytes = 1 << 20

// Fetch says what a client pod fetches from an answer pod.
type Fetch struct {
	// IP is the answer pod's address: the client fetches its answer there over TCP, then pings it.
	IP string
	// ServiceIP is the ClusterIP of a Service in front of the answer pod (port AnswerPort): when set, the
	// client fetches the answer through it too.
	ServiceIP string
	// Download makes the client also fetch /big at each address and count the bytes.
	Download bool
	// Egress is an address (host:port) outside the cluster's pod network, e.g. the API server's: when set,
	// the client sends it a plain HTTP request over TCP and logs what comes back. A reply proves that the
	// pod's traffic leaves its Node and the answer finds its way back.
	Egress string
}

// FetchAnswer runs a client pod default/name on node that fetches the answer of the answer pod at f.IP over
// HTTP (retrying for up to a minute while a handshake or a route is still missing), and /big with
// f.Download; then the same through f.ServiceIP when set; then a request to f.Egress when set; then pings
// f.IP. It returns the client's log: "TCP response:" and the HTTP response, "Download <address>: <n> bytes"
// (n counts the headers too), "Service response:" and its HTTP response, "Egress response:" and what
// f.Egress answered, then ping's summary. The client is deleted afterwards.
func FetchAnswer(ctx context.Context, c client.Client, cs kubernetes.Interface, name, node string, f Fetch, labels map[string]string, timeout time.Duration) (string, error) {
	// busybox's wget crashes in these images (static glibc without NSS), so the HTTP requests are nc's.
	download := ""
	if f.Download {
		download = "yes"
	}
	script := fmt.Sprintf(`fetch() {
  i=0
  until resp=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 "$1" %[2]s) && case "$resp" in *"200 OK"*) true;; *) false;; esac; do
    i=$((i+1)); case $i in 60) echo "no answer from $1:%[2]s: $resp"; exit 1;; esac; sleep 1
  done
}
download() {
  [ -n "%[4]s" ] || return 0
  n=$(printf 'GET /big HTTP/1.0\r\n\r\n' | nc -w 10 "$1" %[2]s | wc -c)
  echo "Download $1: $n bytes"
}
fetch %[1]s
echo "TCP response:"
echo "$resp"
download %[1]s
if [ -n "%[3]s" ]; then
  fetch %[3]s
  echo "Service response:"
  echo "$resp"
  download %[3]s
fi
if [ -n "%[5]s" ]; then
  egress=%[5]s
  i=0
  until resp=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 "${egress%%:*}" "${egress##*:}") && [ -n "$resp" ]; do
    i=$((i+1)); case $i in 30) echo "no answer from $egress"; exit 1;; esac; sleep 1
  done
  echo "Egress response:"
  echo "$resp"
fi
ping -c 3 -W 2 %[1]s`, f.IP, AnswerPort, f.ServiceIP, download, f.Egress)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "client", Image: BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", script}}},
		},
	}
	_ = c.Delete(ctx, pod)
	if err := WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, pod.DeepCopy())
		return err == nil, client.IgnoreAlreadyExists(err)
	}); err != nil {
		return "", fmt.Errorf("failed to create the client pod %s on %s: %w", name, node, err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), pod) }()
	got := &corev1.Pod{}
	if err := WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed, nil
	}); err != nil {
		return "", fmt.Errorf("the client pod %s on %s did not finish in %s (phase %s, %s): %w", name, node, timeout, got.Status.Phase, PodWaiting(got), err)
	}
	logs, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("failed to read the log of the client pod %s: %w", name, err)
	}
	return string(logs), nil
}
