package baremetalhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
)

// laggingClient is a manager client whose cache has not seen the latest write of one host yet: Get of
// that host returns an older copy, as an informer that lags behind the apiserver does.
type laggingClient struct {
	client.Client
	stale *metal3v1.BareMetalHost
}

func (c laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if h, ok := obj.(*metal3v1.BareMetalHost); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(h)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// The race behind a healthy host ending in error: the controller writes "provisioning" and power-cycles
// the host into its PXE boot; the host attests before the manager's cache has seen that write. Deciding
// on the cached host refuses the release (NoBootstrapData, which fails the provisioning for good); the
// store reads through the API reader and releases the data. The lagging cache makes the race
// deterministic.
func TestBootstrapDataReadsPastALaggingCache(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-lag").Name
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "join"},
		Data: map[string][]byte{"value": []byte("#cloud-config\n")}})).To(Succeed())
	h := &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h1", Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec: metal3v1.BareMetalHostSpec{Online: true, UserData: &corev1.SecretReference{Namespace: ns, Name: "join"},
			Image: &metal3v1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123abcd", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}},
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	h.Status.Provisioning.State = metal3v1.StateAvailable
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	cached := h.DeepCopy()
	h.Status.Provisioning.State = metal3v1.StateProvisioning
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	lagging := laggingClient{Client: env.Client, stale: cached}
	name := ns + "/h1"

	_, err := baremetalhost.AttestStore{Client: lagging}.Instructions(ctx, name)
	g.Expect(err).To(MatchError(ContainSubstring(`is "available", neither provisioning nor deprovisioning`)), "the lagging cache should reproduce the refusal")

	data, err := baremetalhost.AttestStore{Client: lagging, Reader: env.GetAPIReader()}.Instructions(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionWriteImage))
	g.Expect(string(in.UserData)).To(Equal("#cloud-config\n"))
}

// A disk image's instructions carry the image, the hints, the config drive's documents and a report
// token that only the host's report can use, once.
func TestWriteImageInstructionsAndTheirReport(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-instr").Name
	for name, data := range map[string]map[string][]byte{
		"join": {"userData": []byte("#cloud-config\nruncmd: [true]\n")},
		"meta": {"metaData": []byte("local-hostname: worker-7\nrack: r12\n")},
		"net":  {"networkData": []byte("links:\n- id: eth0\n  type: phy\n  ethernet_mac_address: 52:54:00:00:00:07\n")},
	} {
		g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data})).To(Succeed())
	}
	h := &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h1", Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec: metal3v1.BareMetalHostSpec{Online: true, UserData: &corev1.SecretReference{Name: "join"},
			MetaData: &corev1.SecretReference{Name: "meta"}, NetworkData: &corev1.SecretReference{Name: "net"},
			RootDeviceHints: &metal3v1.RootDeviceHints{SerialNumber: "disk-7"},
			Image:           &metal3v1.Image{URL: "http://images.example/node.qcow2", Checksum: "abc", ChecksumType: metal3v1.SHA256, DiskFormat: ptr.To("qcow2")}},
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	h.Status.Provisioning.State = metal3v1.StateProvisioning
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	store := baremetalhost.AttestStore{Client: env.Client, Reader: env.GetAPIReader()}
	name := ns + "/h1"

	data, err := store.Instructions(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionWriteImage))
	g.Expect(in.Host).To(Equal(name))
	g.Expect(in.Image.URL).To(Equal("http://images.example/node.qcow2"))
	g.Expect(*in.Image.DiskFormat).To(Equal("qcow2"))
	g.Expect(in.RootDeviceHints.SerialNumber).To(Equal("disk-7"))
	g.Expect(string(in.UserData)).To(Equal("#cloud-config\nruncmd: [true]\n"))
	var md map[string]any
	g.Expect(json.Unmarshal(in.MetaData, &md)).To(Succeed())
	g.Expect(md).To(HaveKeyWithValue("uuid", string(h.UID)))
	g.Expect(md).To(HaveKeyWithValue("metal3-name", "h1"))
	g.Expect(md).To(HaveKeyWithValue("providerid", "yonder-metal://"+ns+"/h1"), "the providerID the agent gives the Node")
	g.Expect(md).To(HaveKeyWithValue("local-hostname", "worker-7"), "the metaData Secret's keys win over the defaults")
	g.Expect(md).To(HaveKeyWithValue("rack", "r12"))
	g.Expect(string(in.NetworkData)).To(MatchJSON(`{"links":[{"id":"eth0","type":"phy","ethernet_mac_address":"52:54:00:00:00:07"}]}`))
	g.Expect(in.ReportToken).NotTo(BeEmpty())

	stored := &metal3v1.BareMetalHost{}
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), stored)).To(Succeed())
	g.Expect(stored.Annotations[baremetalhost.ReportTokenAnnotation]).NotTo(ContainSubstring(in.ReportToken), "only the token's digest is stored")

	report := wire.Report{Host: name, Token: in.ReportToken, Action: wire.ActionWriteImage, Success: true, Device: "/dev/vda", Bytes: 1 << 30}
	for _, bad := range []wire.Report{
		{Host: name, Token: "guessed", Action: wire.ActionWriteImage, Success: true},
		{Host: ns + "/other", Token: in.ReportToken, Action: wire.ActionWriteImage, Success: true},
		{Host: "no-namespace", Token: in.ReportToken, Action: wire.ActionWriteImage, Success: true},
	} {
		var refused *attest.RefusedError
		g.Expect(errors.As(store.Report(ctx, bad), &refused)).To(BeTrue(), "report %+v", bad)
		g.Expect(refused.Reason).To(Equal(wire.ReasonUnknownReportToken))
	}
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), stored)).To(Succeed())
	g.Expect(stored.Annotations).NotTo(HaveKey(baremetalhost.ReportAnnotation), "refused reports change nothing")

	g.Expect(store.Report(ctx, report)).To(Succeed())
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), stored)).To(Succeed())
	var rec baremetalhost.ReportRecord
	g.Expect(json.Unmarshal([]byte(stored.Annotations[baremetalhost.ReportAnnotation]), &rec)).To(Succeed())
	g.Expect(rec.Success).To(BeTrue())
	g.Expect(rec.Device).To(Equal("/dev/vda"))
	g.Expect(stored.Annotations).NotTo(HaveKey(baremetalhost.ReportTokenAnnotation), "the report consumed the token")

	var refused *attest.RefusedError
	g.Expect(errors.As(store.Report(ctx, report), &refused)).To(BeTrue(), "a token reports once")
}
