// Package bmhsim is a SIMULATOR of a BareMetalHost controller for the integration tests of the bare-metal
// provider's machine reconciler: it registers hosts with the status an inspected host has, and advances
// host status one state per tick the way Yonder's host controller (infrastructure-baremetal/reconcilers/
// baremetalhost) does — available + image + online → provisioning → provisioned (powered on); image
// withdrawn → deprovisioning → available (powered off). Paused hosts are left alone. It records each
// provisioning by consumer, so tests can prove no host was provisioned twice for one machine and none for
// two machines at once. Tests of the host controller itself use the real one with the Redfish emulator.
package bmhsim

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// Host describes one BareMetalHost to register.
type Host struct {
	Name, FailureDomain string
	Labels              map[string]string
	// State is the provisioning state (default available).
	State        metal3v1.ProvisioningState
	Paused       bool
	ErrorMessage string
	Consumer     *corev1.ObjectReference
}

// Register creates BareMetalHosts with the status an inspected host has (what the host controller writes
// after registering and inspecting it); c must be able to write status.
func Register(g gomega.Gomega, c client.Client, ns string, hosts ...Host) {
	ctx := context.Background()
	for i, s := range hosts {
		h := &metal3v1.BareMetalHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Name, Labels: map[string]string{}, Annotations: map[string]string{}},
			Spec: metal3v1.BareMetalHostSpec{
				BMC:            metal3v1.BMCDetails{Address: fmt.Sprintf("redfish://127.0.0.1:%d/redfish/v1/Systems/1", 8000+i), CredentialsName: "bmc"},
				BootMACAddress: fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256),
				ConsumerRef:    s.Consumer,
			},
		}
		for k, v := range s.Labels {
			h.Labels[k] = v
		}
		if s.FailureDomain != "" {
			h.Labels[infrav1.FailureDomainLabel] = s.FailureDomain
		}
		if s.Paused {
			h.Annotations[metal3v1.PausedAnnotation] = ""
		}
		g.Expect(c.Create(ctx, h)).To(gomega.Succeed())
		st := s.State
		if st == "" {
			st = metal3v1.StateAvailable
		}
		h.Status = metal3v1.BareMetalHostStatus{
			OperationalStatus: metal3v1.OperationalStatusOK,
			Provisioning:      metal3v1.ProvisionStatus{State: st, ID: string(h.UID)},
			HardwareDetails: &metal3v1.HardwareDetails{Hostname: s.Name, RAMMebibytes: 4096,
				NIC: []metal3v1.NIC{{Name: "eth0", MAC: h.Spec.BootMACAddress, IP: fmt.Sprintf("10.1.%d.%d", i/250, i%250+2), PXE: true}}},
		}
		if s.ErrorMessage != "" {
			h.Status.ErrorType = metal3v1.InspectionError
			h.Status.ErrorMessage = s.ErrorMessage
			h.Status.OperationalStatus = metal3v1.OperationalStatusError
		}
		g.Expect(c.Status().Update(ctx, h)).To(gomega.Succeed())
	}
}

// Simulator advances the hosts of one namespace.
type Simulator struct {
	c  client.Client
	r  client.Reader
	ns string

	mu sync.Mutex
	// hold keeps hosts in "provisioning" (to observe the block-move annotation).
	hold bool
	// holdDeprovision keeps hosts in "deprovisioning" (to observe that a host is released only once it
	// is available again: a test that merely polls for the transient state can miss it).
	holdDeprovision bool
	// fail makes provisioning of the named host fail with this message.
	fail map[string]string
	// provisioned counts, per host and consumer UID, how often provisioning started.
	provisioned map[string]map[string]int
}

// Start runs the simulator for namespace ns until the test ends: it reads hosts through r (uncached)
// and writes their status through c.
func Start(t testing.TB, c client.Client, r client.Reader, ns string) *Simulator {
	t.Helper()
	s := &Simulator{c: c, r: r, ns: ns, fail: map[string]string{}, provisioned: map[string]map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.step(ctx)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// SetHold keeps (or stops keeping) hosts in "provisioning".
func (s *Simulator) SetHold(v bool) { s.mu.Lock(); s.hold = v; s.mu.Unlock() }

// SetHoldDeprovision keeps (or stops keeping) hosts in "deprovisioning".
func (s *Simulator) SetHoldDeprovision(v bool) { s.mu.Lock(); s.holdDeprovision = v; s.mu.Unlock() }

// SetFail makes provisioning of host fail with msg.
func (s *Simulator) SetFail(host, msg string) { s.mu.Lock(); s.fail[host] = msg; s.mu.Unlock() }

// Provisionings returns a copy of the record: per host, per consumer UID, how often provisioning started.
func (s *Simulator) Provisionings() map[string]map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]int{}
	for h, m := range s.provisioned {
		out[h] = map[string]int{}
		for k, v := range m {
			out[h][k] = v
		}
	}
	return out
}

func (s *Simulator) step(ctx context.Context) {
	list := &metal3v1.BareMetalHostList{}
	if err := s.r.List(ctx, list, client.InNamespace(s.ns)); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range list.Items {
		h := &list.Items[i]
		if _, ok := h.Annotations[metal3v1.PausedAnnotation]; ok {
			continue
		}
		changed, started := s.advance(h)
		if !changed {
			continue
		}
		// A provisioning counts once it is stored: an update refused (a conflict with the provider's own
		// write, a stale read) is tried again from a fresh read, and counting it at the first try would
		// record two provisionings for one.
		if err := s.c.Status().Update(ctx, h); err != nil || !started {
			continue
		}
		if s.provisioned[h.Name] == nil {
			s.provisioned[h.Name] = map[string]int{}
		}
		s.provisioned[h.Name][string(h.Spec.ConsumerRef.UID)]++
	}
}

// advance moves h one state on; it reports whether anything changed and whether that starts provisioning.
func (s *Simulator) advance(h *metal3v1.BareMetalHost) (changed, started bool) {
	st := &h.Status
	deploy := h.Spec.Image != nil || h.Spec.CustomDeploy != nil
	switch {
	case st.Provisioning.State == metal3v1.StateAvailable && deploy && h.Spec.Online && h.Spec.ConsumerRef != nil && st.ErrorType == "":
		st.Provisioning.State = metal3v1.StateProvisioning
		return true, true
	case st.Provisioning.State == metal3v1.StateProvisioning && deploy && s.fail[h.Name] != "":
		st.ErrorType, st.ErrorMessage, st.OperationalStatus = metal3v1.ProvisioningError, s.fail[h.Name], metal3v1.OperationalStatusError
	case st.Provisioning.State == metal3v1.StateProvisioning && deploy && !s.hold:
		st.Provisioning.State, st.PoweredOn = metal3v1.StateProvisioned, true
		if h.Spec.Image != nil {
			st.Provisioning.Image = *h.Spec.Image
		}
	case (st.Provisioning.State == metal3v1.StateProvisioned || st.Provisioning.State == metal3v1.StateProvisioning) && !deploy:
		st.Provisioning.State = metal3v1.StateDeprovisioning
		st.ErrorType, st.ErrorMessage, st.OperationalStatus = "", "", metal3v1.OperationalStatusOK
	case st.Provisioning.State == metal3v1.StateDeprovisioning && !s.holdDeprovision:
		st.Provisioning.State, st.PoweredOn, st.Provisioning.Image = metal3v1.StateAvailable, h.Spec.Online, metal3v1.Image{}
	default:
		return false, false
	}
	return true, false
}
