package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	"github.com/yonder-dev/yonder/test/stack"
)

// MetalPool is the name of the lab's bare-metal MachineDeployment (and of its templates).
const MetalPool = ClusterName + "-metal-0"

// metalHosts is how many QEMU bare-metal hosts the lab's stack gets.
func metalHosts(l *Options) int {
	if l.Metal {
		return 1
	}
	return 0
}

// addMetal records the lab's bare-metal hosts for `lab status` and, when the lab has a Cluster, adds the
// metal pool to it: what `clusterctl generate cluster --flavor metal` (templates/cluster-template-metal.yaml)
// renders for the worker pool — YonderConfigTemplate, YonderMetalMachineTemplate, MachineDeployment,
// YonderMetalRemediationTemplate and MachineHealthCheck — renamed to MetalPool so they sit beside the ssh
// flavor's lab-md-0, with one replica, writing the stack's cloud OS image (test/osimage, served beside the
// boot artifacts). It waits until the pool's Machine has a Ready Node: the host claimed, its VM PXE-booted
// through the metal manager's boot services on the lab bridge, attested with its TPM, the image written to
// its disk with a config drive, the disk booted, cloud-init run the bootstrap data, the agent's kubelet Ready.
func addMetal(ctx context.Context, s *stack.Stack, l *Options, st *State, dir string, step func(string, ...any)) error {
	if !l.Metal {
		return nil
	}
	for _, h := range s.MetalHosts() {
		st.Hosts = append(st.Hosts, Host{Name: h.Name, Site: "metal (QEMU VM, BMC " + h.BMCAddress + ")", Address: h.BootAddress.String(), Namespace: "-"})
	}
	if err := st.write(); err != nil {
		return err
	}
	if l.NoCluster {
		step("bare-metal host(s) registered as BareMetalHosts, available; no Cluster, so none is claimed")
		return nil
	}
	t0 := time.Now()
	step("adding MachineDeployment %s (1 replica) to Cluster %q from templates/cluster-template-metal.yaml (clusterctl generate cluster --flavor metal)", MetalPool, ClusterName)
	manifest, err := s.Clusterctl(ctx, append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret}, append(s.MetalImageEnv(), s.TemplateEnv()...)...),
		"generate", "cluster", ClusterName, "--infrastructure", "yonder-metal", "--flavor", "metal",
		"--kubernetes-version", stack.KubernetesVersion, "--worker-machine-count", "1", "--target-namespace", st.Namespace)
	if err != nil {
		return err
	}
	objs, err := metalPoolObjects([]byte(manifest))
	if err != nil {
		return err
	}
	if err := createAndRecord(ctx, s, objs, filepath.Join(dir, "metal.yaml")); err != nil {
		return err
	}
	step("waiting for the metal Node: host claimed → VM PXE-boots (QEMU without KVM: about a minute) → TPM attested → image written to its disk → disk boot → cloud-init runs the bootstrap data → Node Ready (minutes under TCG)")
	last := ""
	err = stack.WaitFor(ctx, l.Timeout, func(ctx context.Context) (bool, error) {
		ms := &clusterv1.MachineList{}
		if err := s.Client.List(ctx, ms, client.InNamespace(st.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: MetalPool}); err != nil {
			return false, nil //nolint:nilerr // transient: keep waiting
		}
		msg := "no Machine yet"
		done := false
		if len(ms.Items) == 1 {
			m := ms.Items[0]
			msg = fmt.Sprintf("Machine %s phase %s", m.Name, m.Status.Phase)
			done = m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Spec.ProviderID != "" && m.Status.NodeRef.IsDefined()
		}
		if msg != last {
			step("metal: %s", msg)
			last = msg
		}
		return done, nil
	})
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted while waiting for the metal Machine: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("the metal Machine got no Node in %s (metal manager log in %s, VM consoles in %s): %w",
			l.Timeout, s.Logs(), filepath.Join(s.Dir, "metal"), err)
	}
	step("metal Machine Running with a Ready Node in %.1fs (VM console: %s)", time.Since(t0).Seconds(), filepath.Join(s.Dir, "metal", "<host>", "console.log"))
	return nil
}

// metalPoolObjects picks the worker pool out of the generated metal flavor (its templates, MachineDeployment
// and health check) and renames it to MetalPool.
func metalPoolObjects(manifest []byte) ([]*unstructured.Unstructured, error) {
	from := ClusterName + "-md-0"
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("failed to decode the generated metal flavor: %w", err)
		}
		switch u.GetKind() {
		case "YonderConfigTemplate", "YonderMetalMachineTemplate", "YonderMetalRemediationTemplate":
		case "MachineHealthCheck":
			for _, ref := range [][]string{{"spec", "selector", "matchLabels", clusterv1.MachineDeploymentNameLabel}, {"spec", "remediation", "templateRef", "name"}} {
				if n, _, _ := unstructured.NestedString(u.Object, ref...); n != from {
					return nil, fmt.Errorf("failed to adapt the metal flavor: MachineHealthCheck %s has %q at %s, want %q", u.GetName(), n, strings.Join(ref, "."), from)
				}
				if err := unstructured.SetNestedField(u.Object, MetalPool, ref...); err != nil {
					return nil, err
				}
			}
		case "MachineDeployment":
			for _, ref := range [][]string{{"spec", "template", "spec", "bootstrap", "configRef", "name"}, {"spec", "template", "spec", "infrastructureRef", "name"}} {
				if n, _, _ := unstructured.NestedString(u.Object, ref...); n != from {
					return nil, fmt.Errorf("failed to adapt the metal flavor: MachineDeployment %s refers to %q at %s, want %q", u.GetName(), n, strings.Join(ref, "."), from)
				}
				if err := unstructured.SetNestedField(u.Object, MetalPool, ref...); err != nil {
					return nil, err
				}
			}
		default:
			continue
		}
		if u.GetName() != from {
			return nil, fmt.Errorf("failed to adapt the metal flavor: %s %s is not named %s", u.GetKind(), u.GetName(), from)
		}
		u.SetName(MetalPool)
		objs = append(objs, u)
	}
	if len(objs) != 5 {
		return nil, fmt.Errorf("failed to adapt the metal flavor: want its YonderConfigTemplate, YonderMetalMachineTemplate, MachineDeployment, YonderMetalRemediationTemplate and MachineHealthCheck, found %d of them", len(objs))
	}
	return objs, nil
}

// printMetalStatus lists the management cluster's BareMetalHosts (read as unstructured: the plugin's
// scheme has no Metal3 types).
func printMetalStatus(ctx context.Context, mgmt client.Client, namespace string, out io.Writer) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "metal3.io", Version: "v1alpha1", Kind: "BareMetalHostList"})
	if err := mgmt.List(ctx, list, client.InNamespace(namespace)); err != nil {
		// No Metal3 CRD: the lab runs without --metal.
		if strings.Contains(err.Error(), "no matches for kind") {
			return nil
		}
		return fmt.Errorf("failed to list BareMetalHosts: %w", err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	_, _ = fmt.Fprintf(out, "\nBareMetalHosts: %d\n", len(list.Items))
	rows := [][]string{}
	for _, h := range list.Items {
		state, _, _ := unstructured.NestedString(h.Object, "status", "provisioning", "state")
		on, _, _ := unstructured.NestedBool(h.Object, "status", "poweredOn")
		consumer, _, _ := unstructured.NestedString(h.Object, "spec", "consumerRef", "name")
		bmc, _, _ := unstructured.NestedString(h.Object, "spec", "bmc", "address")
		rows = append(rows, []string{h.GetName(), cli.Dash(state), fmt.Sprint(on), cli.Dash(consumer), bmc})
	}
	return (&cli.Options{Out: out}).Table([]string{"HOST", "STATE", "POWERED ON", "CONSUMER", "BMC"}, rows)
}
