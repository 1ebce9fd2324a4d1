package yonderconfig_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/test/builder"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/reconcilers/yonderconfig"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/promread"
)

func workloadClient(g *WithT) *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(workload.Config)
	g.Expect(err).NotTo(HaveOccurred())
	return cs
}

// The user story: a MachineDeployment of 3 with a YonderConfigTemplate yields 3 data Secrets that
// satisfy the bootstrap contract, each with its own valid bootstrap token that exists in the workload
// cluster, and an AgentConfig that round-trips.
func TestMachineDeploymentOfThreeGetsContractDataSecrets(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cluster := newCluster(ctx, t, g, "md")
	ns := cluster.Namespace
	md := newGPUMachineDeployment(ctx, g, cluster)

	// CAPI copies each config's status.dataSecretName into its Machine.
	machines := &clusterv1.MachineList{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(3))
		for _, m := range machines.Items {
			g.Expect(m.Spec.Bootstrap.DataSecretName).NotTo(BeNil())
		}
	}).Should(Succeed())

	cs := workloadClient(g)
	tokens := map[string]bool{}
	for _, m := range machines.Items {
		cfg, s := checkContractSecret(ctx, g, cluster, &m)
		ac := checkGPUPoolAgentConfig(g, s, &m)
		checkBootstrapToken(ctx, g, cs, s, ac, tokens)
		// The token never appears in the YonderConfig.
		raw, err := json.Marshal(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(raw)).NotTo(ContainSubstring(strings.Split(ac.BootstrapToken, ".")[1]))
	}
	g.Expect(tokens).To(HaveLen(3))

	// Our CRDs carry the contract label; data Secrets are moved with their YonderConfig through the ownerRef.
	for _, n := range []string{"yonderconfigs.bootstrap.cluster.x-k8s.io", "yonderconfigtemplates.bootstrap.cluster.x-k8s.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: n}, crd)).To(Succeed())
		g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))
	}
}

// newGPUMachineDeployment creates a YonderConfigTemplate asking for a GPU pool (labels, taints, kubelet
// args, site, rootfs, files, commands), a generic infrastructure template and a MachineDeployment of 3.
func newGPUMachineDeployment(ctx context.Context, g *WithT, cluster *clusterv1.Cluster) *clusterv1.MachineDeployment {
	ns := cluster.Namespace
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extra"}, Data: map[string][]byte{"motd": []byte("hello from a secret")}})).To(Succeed())
	tmpl := &bootstrapv1.YonderConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers"},
		Spec: bootstrapv1.YonderConfigTemplateSpec{Template: bootstrapv1.YonderConfigTemplateResource{Spec: bootstrapv1.YonderConfigSpec{
			NodeLabels:       map[string]string{"yonder.dev/pool": "gpu"},
			NodeTaints:       []bootstrapv1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
			KubeletExtraArgs: []bootstrapv1.Arg{{Name: "max-pods", Value: "64"}},
			Site:             "edge-a",
			Rootfs:           bootstrapv1.Rootfs{Image: "registry.lab/rootfs@sha256:" + strings.Repeat("c", 64)},
			GPU:              bootstrapv1.GPU{Mode: "Auto"},
			Files: []bootstrapv1.File{
				{Path: "/etc/motd", ContentFrom: &bootstrapv1.SecretKeySelector{Name: "extra", Key: "motd"}, Permissions: "0644"},
				{Path: "/etc/yonder/note", Content: "inline"},
			},
			PreCommands:  []string{"echo pre"},
			PostCommands: []string{"echo post"},
		}}},
	}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	infraTmpl := &unstructured.Unstructured{}
	infraTmpl.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	infraTmpl.SetKind(builder.GenericInfrastructureMachineTemplateKind)
	infraTmpl.SetNamespace(ns)
	infraTmpl.SetName("infra")
	_ = unstructured.SetNestedMap(infraTmpl.Object, map[string]any{}, "spec", "template", "spec")
	g.Expect(env.Create(ctx, infraTmpl)).To(Succeed())

	labels := map[string]string{"pool": "gpu", clusterv1.WatchLabel: watchFilter}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name,
			Replicas:    ptr.To[int32](3),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"pool": "gpu"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster.Name,
					Version:     "v1.36.3",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "YonderConfigTemplate", Name: tmpl.Name,
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureMachineTemplateKind, Name: infraTmpl.GetName(),
					},
				},
			},
		},
	}
	g.Expect(env.Create(ctx, md)).To(Succeed())

	return md
}

// checkContractSecret asserts the bootstrap contract for m's YonderConfig and data Secret:
// deterministic name, value + format, cluster-name label, controller ownerRef, the conditions.
func checkContractSecret(ctx context.Context, g *WithT, cluster *clusterv1.Cluster, m *clusterv1.Machine) (*bootstrapv1.YonderConfig, *corev1.Secret) {
	ns := cluster.Namespace
	cfgName := m.Spec.Bootstrap.ConfigRef.Name
	cfg := getConfig(ctx, g, ns, cfgName)
	g.Expect(cfg.Status.DataSecretName).To(Equal(cfgName))
	g.Expect(cfg.Status.Initialization.DataSecretCreated).To(HaveValue(BeTrue()))
	g.Expect(conditions.IsTrue(cfg, bootstrapv1.YonderConfigDataSecretAvailableCondition)).To(BeTrue())
	g.Expect(conditions.IsTrue(cfg, clusterv1.ReadyCondition)).To(BeTrue())
	g.Expect(*m.Spec.Bootstrap.DataSecretName).To(Equal(cfgName))
	s := dataSecret(ctx, g, ns, cfgName)
	g.Expect(s.Type).To(Equal(clusterv1.ClusterSecretType))
	g.Expect(s.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, cluster.Name))
	g.Expect(string(s.Data["format"])).To(Equal("cloud-config"))
	g.Expect(metav1.GetControllerOf(s)).To(PointTo(MatchFields(IgnoreExtras, Fields{"Kind": Equal("YonderConfig"), "Name": Equal(cfgName)})))
	return cfg, s
}

// checkGPUPoolAgentConfig asserts that the data is cloud-init with only write_files and runcmd (Parse is
// strict) and that its AgentConfig round-trips and carries what the pool asked for.
func checkGPUPoolAgentConfig(g *WithT, s *corev1.Secret, m *clusterv1.Machine) *agentv1.AgentConfig {
	ci, err := cloudinit.Parse(s.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ci.RunCmd).To(Equal([][]string{{"/bin/sh", cloudinit.InstallScriptPath}, {cloudinit.AgentPath, "bootstrap", "--config", agentv1.DefaultPath}}))
	installer := ci.WriteFiles[0]
	g.Expect(installer.Content).To(ContainSubstring(defaultAgent.URL))
	g.Expect(installer.Content).To(ContainSubstring(defaultAgent.SHA256))
	g.Expect(ci.WriteFiles[1].Permissions).To(Equal("0600"))

	ac, err := ci.AgentConfig()
	g.Expect(err).NotTo(HaveOccurred())
	again, err := agentv1.Encode(ac)
	g.Expect(err).NotTo(HaveOccurred())
	back, err := agentv1.Decode(again)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back).To(Equal(ac))
	g.Expect(ac.NodeName).To(Equal(m.Name))
	g.Expect(ac.KubernetesVersion).To(Equal("v1.36.3"))
	g.Expect(ac.APIServer.Endpoint).To(Equal(workload.Endpoint))
	g.Expect(ac.APIServer.CACertificate).To(Equal(string(workload.CACertPEM)))
	g.Expect(ac.Labels).To(Equal(map[string]string{"yonder.dev/pool": "gpu"}))
	g.Expect(ac.Taints).To(Equal([]agentv1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}))
	g.Expect(ac.KubeletExtraArgs).To(Equal([]agentv1.Arg{{Name: "max-pods", Value: "64"}}))
	g.Expect(ac.Site).To(Equal("edge-a"))
	g.Expect(ac.GPU.Mode).To(Equal(agentv1.GPUModeAuto))
	g.Expect(ac.Files).To(ContainElement(agentv1.File{Path: "/etc/motd", Content: "hello from a secret", Permissions: "0644"}))
	g.Expect(ac.PreCommands).To(Equal([]string{"echo pre"}))

	return ac
}

// checkBootstrapToken asserts that the token is distinct (tokens records it), exists in the workload
// cluster in the standard format and authenticates as a bootstrapper.
func checkBootstrapToken(ctx context.Context, g *WithT, cs *kubernetes.Clientset, s *corev1.Secret, ac *agentv1.AgentConfig, tokens map[string]bool) {
	g.Expect(tokens).NotTo(HaveKey(ac.BootstrapToken))
	tokens[ac.BootstrapToken] = true
	id := strings.Split(ac.BootstrapToken, ".")[0]
	g.Expect(s.Annotations).To(HaveKeyWithValue(bootstrapv1.TokenIDAnnotation, id))
	ts, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ts.Type).To(Equal(corev1.SecretType("bootstrap.kubernetes.io/token")))
	g.Expect(string(ts.Data["usage-bootstrap-authentication"])).To(Equal("true"))
	exp, err := time.Parse(time.RFC3339, string(ts.Data["expiration"]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exp).To(BeTemporally(">", time.Now().Add(5*time.Minute)))
	tokenCfg := rest.AnonymousClientConfig(workload.Config)
	tokenCfg.BearerToken = ac.BootstrapToken
	bootstrapper, err := kubernetes.NewForConfig(tokenCfg)
	g.Expect(err).NotTo(HaveOccurred())
	// The apiserver authenticates bootstrap tokens from an informer: a new token works once it has seen it.
	var review *authenticationv1.SelfSubjectReview
	g.Eventually(func() error {
		review, err = bootstrapper.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:bootstrap:" + id))
	g.Expect(review.Status.UserInfo.Groups).To(ContainElement("system:bootstrappers"))
}

// Creating the Node for a Machine removes its token; a forged serving CSR is not approved, a correct one
// is. A host that got its own forged hostname (kubernetes.default.svc) recorded among its Machine's
// addresses still gets no certificate for a cluster service name.
func TestNodeJoinRemovesTokenAndOnlyMatchingServingCSRsAreApproved(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	joined := outcome("joined")
	joinCount, joinSum := joinSeconds()
	cluster := newCluster(ctx, t, g, "join")
	addrs := []clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "10.250.7.11"},
		{Type: clusterv1.MachineHostName, Address: "host-11"},
		{Type: clusterv1.MachineInternalDNS, Address: "kubernetes.default.svc"},
	}
	offline := bootstrapv1.Source{Path: "/media/yonder/yonder-agent", SHA256: strings.Repeat("0f", 32)}
	m := newMachine(ctx, g, cluster, "worker-11", bootstrapv1.YonderConfigSpec{Agent: offline}, addrs)
	s := dataSecret(ctx, g, cluster.Namespace, m.Name)
	id := s.Annotations[bootstrapv1.TokenIDAnnotation]
	// Neither the YonderConfig nor the Machine set a version: the control plane's is used. The agent comes
	// from the offline path the spec names instead of the manager's default URL.
	g.Expect(agentConfigOf(g, s).KubernetesVersion).To(Equal(controlPlaneVersion))
	ci, err := cloudinit.Parse(s.Data["value"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ci.WriteFiles[0].Content).To(And(ContainSubstring("cp '/media/yonder/yonder-agent'"), ContainSubstring(offline.SHA256), Not(ContainSubstring(defaultAgent.URL))))
	cs := workloadClient(g)
	_, err = cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// The kubelet registers the Node with the Machine's providerID; CAPI links them.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name}, Spec: corev1.NodeSpec{ProviderID: "yonder-test://" + cluster.Namespace + "/" + m.Name}}
	_, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	g.Eventually(func(g Gomega) {
		got := &clusterv1.Machine{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		g.Expect(got.Status.NodeRef.Name).To(Equal(node.Name))
		g.Expect(got.Status.Addresses).To(HaveLen(3))
	}).Should(Succeed())
	g.Eventually(func() bool {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found")
	}).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		c := conditions.Get(getConfig(ctx, g, cluster.Namespace, m.Name), bootstrapv1.YonderConfigBootstrapTokenReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(bootstrapv1.YonderConfigBootstrapTokenRemovedReason))
	}).Should(Succeed())
	// The operator's view: the data became available, the token was created and deleted at the join —
	// named by its public ID; its secret half appears in no Event.
	secretHalf := strings.SplitN(agentConfigOf(g, s).BootstrapToken, ".", 2)[1]
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, getConfig(ctx, g, cluster.Namespace, m.Name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElements(
			"Normal "+bootstrapv1.YonderConfigDataSecretAvailableCondition+": "+bootstrapv1.YonderConfigDataSecretAvailableCondition+" is True ("+bootstrapv1.YonderConfigDataSecretAvailableReason+")",
			HavePrefix("Normal "+yonderconfig.BootstrapTokenCreatedEvent+": Created bootstrap token "+id+" (valid until "),
			"Normal "+yonderconfig.BootstrapTokenDeletedEvent+": Node "+node.Name+" joined; deleted its bootstrap token "+id,
		))
		g.Expect(evs).To(HaveEach(Not(ContainSubstring(secretHalf))))
	}).Should(Succeed())
	// The operator's dashboard: one bootstrap more ended with its Node joined, and the join time was
	// observed once, between the YonderConfig's creation and now.
	g.Expect(outcome("joined")).To(Equal(joined + 1))
	count, sum := joinSeconds()
	g.Expect(count).To(Equal(joinCount + 1))
	g.Expect(sum - joinSum).To(And(BeNumerically(">=", 0), BeNumerically("<=", time.Since(start).Seconds()+1)))

	// Serving CSRs, each requested with a node's own identity (impersonated, as the kubelet's client cert would be).
	good := createServingCSR(ctx, g, "good", node.Name, []string{"host-11"}, []string{"10.250.7.11"})
	wrongIP := createServingCSR(ctx, g, "wrong-ip", node.Name, []string{"host-11"}, []string{"10.250.7.99"})
	wrongName := createServingCSR(ctx, g, "wrong-dns", node.Name, []string{"evil.example.com"}, []string{"10.250.7.11"})
	wrongNode := createServingCSR(ctx, g, "wrong-node", "intruder", []string{"host-11"}, []string{"10.250.7.11"})
	serviceName := createServingCSR(ctx, g, "service-name", node.Name, []string{"host-11", "kubernetes.default.svc"}, []string{"10.250.7.11"})
	nodeName := createServingCSR(ctx, g, "node-name", node.Name, []string{node.Name}, []string{"10.250.7.11"})
	g.Eventually(func() bool { return approved(ctx, g, good) }).Should(BeTrue())
	g.Eventually(func() bool { return approved(ctx, g, nodeName) }).Should(BeTrue(), "the node's own name is bound to its identity")
	for _, name := range []string{wrongIP, wrongName, wrongNode, serviceName} {
		g.Consistently(func() bool { return approved(ctx, g, name) }, 2*time.Second).Should(BeFalse(), name)
		// Left untouched: not denied either.
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(csr.Status.Conditions).To(BeEmpty())
	}
}

// An expired token is replaced (and the data rewritten) before the host uses it; a token close to
// expiry is extended; deleting the Machine deletes its token.
func TestTokensAreRefreshedUntilJoinAndDeletedWithTheMachine(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cluster := newCluster(ctx, t, g, "refresh")
	m := newMachine(ctx, g, cluster, "worker-r", bootstrapv1.YonderConfigSpec{}, nil)
	s := dataSecret(ctx, g, cluster.Namespace, m.Name)
	oldID := s.Annotations[bootstrapv1.TokenIDAnnotation]
	cs := workloadClient(g)
	setExpiration := func(id string, at time.Time) {
		ts, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		ts.Data["expiration"] = []byte(at.UTC().Format(time.RFC3339))
		_, err = cs.CoreV1().Secrets("kube-system").Update(ctx, ts, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	// Close to expiry (less than half the TTL left): extended in place.
	soon := time.Now().Add(2 * time.Minute)
	setExpiration(oldID, soon)
	g.Eventually(func(g Gomega) {
		ts, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+oldID, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		exp, err := time.Parse(time.RFC3339, string(ts.Data["expiration"]))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(exp).To(BeTemporally(">", soon.Add(5*time.Minute)))
	}).Should(Succeed())

	// Expired: replaced by a new token, the data Secret carries the new one, the old one is gone.
	setExpiration(oldID, time.Now().Add(-time.Minute))
	var newID string
	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(m), s)).To(Succeed())
		newID = s.Annotations[bootstrapv1.TokenIDAnnotation]
		g.Expect(newID).NotTo(Equal(oldID))
		g.Expect(agentConfigOf(g, s).BootstrapToken).To(HavePrefix(newID + "."))
	}).Should(Succeed())
	_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+newID, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	// The old token goes after the data carries the new one (never a moment without a usable token), so
	// right after the data changed it may still be there.
	g.Eventually(func() error {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+oldID, metav1.GetOptions{})
		return err
	}).Should(MatchError(ContainSubstring("not found")))

	// Deleting the Machine deletes the YonderConfig, whose finalizer deletes the token.
	g.Expect(env.Delete(ctx, m)).To(Succeed())
	g.Eventually(func() bool {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+newID, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found")
	}).Should(BeTrue())
}

// A paused Cluster's YonderConfigs get the Paused condition and are left alone (an expired token is
// not replaced); unpausing resumes. Objects without the watch-filter label are ignored.
func TestPauseAndWatchFilter(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cluster := newCluster(ctx, t, g, "pause")
	m := newMachine(ctx, g, cluster, "worker-p", bootstrapv1.YonderConfigSpec{}, nil)
	oldID := dataSecret(ctx, g, cluster.Namespace, m.Name).Annotations[bootstrapv1.TokenIDAnnotation]

	setPaused := func(paused bool) {
		got := &clusterv1.Cluster{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Paused = ptr.To(paused)
		g.Expect(env.Patch(ctx, got, p)).To(Succeed())
	}
	setPaused(true)
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsTrue(getConfig(ctx, g, cluster.Namespace, m.Name), clusterv1.PausedCondition)).To(BeTrue())
	}).Should(Succeed())
	cs := workloadClient(g)
	ts, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+oldID, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ts.Data["expiration"] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	_, err = cs.CoreV1().Secrets("kube-system").Update(ctx, ts, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tokenID := func(g Gomega) string {
		s := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(m), s)).To(Succeed())
		return s.Annotations[bootstrapv1.TokenIDAnnotation]
	}
	g.Consistently(tokenID).Should(Equal(oldID))

	setPaused(false)
	g.Eventually(tokenID).ShouldNot(Equal(oldID))
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsFalse(getConfig(ctx, g, cluster.Namespace, m.Name), clusterv1.PausedCondition)).To(BeTrue())
	}).Should(Succeed())

	// A Machine and YonderConfig without the label: CAPI (unfiltered) links them, this manager ignores them.
	other := newMachineWithLabels(ctx, g, cluster, "other", bootstrapv1.YonderConfigSpec{}, nil, nil)
	g.Eventually(func(g Gomega) {
		g.Expect(metav1.GetControllerOf(getConfig(ctx, g, cluster.Namespace, other.Name))).NotTo(BeNil())
	}).Should(Succeed())
	g.Consistently(func(g Gomega) {
		c := getConfig(ctx, g, cluster.Namespace, other.Name)
		g.Expect(c.Finalizers).To(BeEmpty())
		g.Expect(c.Status.Conditions).To(BeEmpty())
		err := env.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no data Secret for an ignored config: %v", err)
	}).Should(Succeed())
}

// A configuration that cannot be rendered says why in DataSecretAvailable and creates no token.
func TestUnrenderableConfigSaysWhy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cluster := newCluster(ctx, t, g, "unrenderable")
	spec := bootstrapv1.YonderConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/x", ContentFrom: &bootstrapv1.SecretKeySelector{Name: "missing", Key: "k"}}}}
	m := newMachine(ctx, g, cluster, "worker-u", spec, nil)
	g.Eventually(func(g Gomega) {
		c := conditions.Get(getConfig(ctx, g, cluster.Namespace, m.Name), bootstrapv1.YonderConfigDataSecretAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(bootstrapv1.YonderConfigInvalidConfigurationReason))
		g.Expect(c.Message).To(ContainSubstring("Secret " + cluster.Namespace + "/missing for file /etc/x does not exist"))
	}).Should(Succeed())
	tokens, err := workloadClient(g).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range tokens.Items {
		g.Expect(s.Annotations["bootstrap.yonder.dev/yonderconfig"]).NotTo(Equal(cluster.Namespace + "/" + m.Name))
	}
}

// Invalid specs are rejected by the API server with field paths; templates are immutable except for
// ClusterClass dry-runs.
func TestAdmission(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "admission").Name
	for _, tc := range []struct {
		spec bootstrapv1.YonderConfigSpec
		want string
	}{
		{bootstrapv1.YonderConfigSpec{Agent: bootstrapv1.Source{URL: "ftp://x/agent", SHA256: strings.Repeat("a", 64)}}, "spec.agent.url: Invalid value"},
		{bootstrapv1.YonderConfigSpec{Agent: bootstrapv1.Source{URL: "http://x/agent"}}, "spec.agent.sha256: Invalid value"},
		{bootstrapv1.YonderConfigSpec{Agent: bootstrapv1.Source{SHA256: "nothex"}}, "spec.agent.sha256"},
		{bootstrapv1.YonderConfigSpec{NodeLabels: map[string]string{"bad key!": "v"}}, "spec.nodeLabels[bad key!]: Invalid value"},
		{bootstrapv1.YonderConfigSpec{NodeTaints: []bootstrapv1.Taint{{Key: "k", Effect: "Sometimes"}}}, "spec.nodeTaints[0].effect: Unsupported value"},
		{bootstrapv1.YonderConfigSpec{KubeletExtraArgs: []bootstrapv1.Arg{{Name: "--max-pods", Value: "1"}}}, "spec.kubeletExtraArgs[0].name: Invalid value"},
		{bootstrapv1.YonderConfigSpec{Files: []bootstrapv1.File{{Path: "relative/file", Content: "x"}}}, "spec.files[0].path: Invalid value"},
		{bootstrapv1.YonderConfigSpec{Files: []bootstrapv1.File{{Path: "/a", Content: "x", ContentFrom: &bootstrapv1.SecretKeySelector{Name: "s", Key: "k"}}}}, "spec.files[0].contentFrom: Forbidden"},
		{bootstrapv1.YonderConfigSpec{Rootfs: bootstrapv1.Rootfs{Image: "i", Archive: &bootstrapv1.Source{Path: "/r.tar", SHA256: strings.Repeat("a", 64)}}}, "spec.rootfs: Forbidden"},
		{bootstrapv1.YonderConfigSpec{BootstrapToken: bootstrapv1.BootstrapToken{TTLSeconds: 5}}, "spec.bootstrapToken.ttlSeconds"},
		{bootstrapv1.YonderConfigSpec{Version: "1.36"}, "spec.version"},
	} {
		err := env.Create(ctx, &bootstrapv1.YonderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: tc.spec})
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.want)
	}

	// Defaults are visible on the object.
	ok := &bootstrapv1.YonderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ok"}}
	g.Expect(env.Create(ctx, ok)).To(Succeed())
	g.Expect(ok.Spec.GPU.Mode).To(Equal("None"))
	g.Expect(ok.Spec.BootstrapToken.TTLSeconds).To(BeEquivalentTo(900))

	tmpl := &bootstrapv1.YonderConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tmpl"},
		Spec:       bootstrapv1.YonderConfigTemplateSpec{Template: bootstrapv1.YonderConfigTemplateResource{Spec: bootstrapv1.YonderConfigSpec{Site: "a"}}},
	}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	tmpl.Spec.Template.Spec.Site = "b"
	g.Expect(env.Update(ctx, tmpl)).To(MatchError(ContainSubstring("spec.template.spec: Forbidden")))
	tmpl.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	g.Expect(env.Update(ctx, tmpl, client.DryRunAll)).To(Succeed())
	bad := &bootstrapv1.YonderConfigTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-tmpl"},
		Spec:       bootstrapv1.YonderConfigTemplateSpec{Template: bootstrapv1.YonderConfigTemplateResource{Spec: bootstrapv1.YonderConfigSpec{Site: "Not_DNS"}}},
	}
	g.Expect(env.Create(ctx, bad)).To(MatchError(ContainSubstring("spec.template.spec.site: Invalid value")))
}

// A Machine's token is refreshed for a bounded time only: the data Secret records the end of the
// refresh window; once it has passed (here: moved into the past, as time would) the token is deleted, an
// expired token is not replaced, and BootstrapTokenReady says why. A Machine that a MachineHealthCheck
// marked for remediation before joining loses its token the same way.
func TestTokenRefreshStopsForMachinesThatWillNotJoin(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	expired, remediated, deleted := outcome("refresh_window_expired"), outcome("remediated"), outcome("deleted")
	cluster := newCluster(ctx, t, g, "stop")
	cs := workloadClient(g)
	tokenGone := func(id string) func() bool {
		return func() bool {
			_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
			return err != nil && strings.Contains(err.Error(), "not found")
		}
	}
	reasonIs := func(name, reason string) func(g Gomega) {
		return func(g Gomega) {
			c := conditions.Get(getConfig(ctx, g, cluster.Namespace, name), bootstrapv1.YonderConfigBootstrapTokenReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(reason))
		}
	}

	late := newMachine(ctx, g, cluster, "worker-late", bootstrapv1.YonderConfigSpec{BootstrapToken: bootstrapv1.BootstrapToken{RefreshSeconds: 3600}}, nil)
	s := dataSecret(ctx, g, cluster.Namespace, late.Name)
	id := s.Annotations[bootstrapv1.TokenIDAnnotation]
	until, err := time.Parse(time.RFC3339, s.Annotations[bootstrapv1.TokenRefreshUntilAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(until).To(BeTemporally("~", s.CreationTimestamp.Add(time.Hour), 5*time.Second), "the window starts with the data")
	g.Expect(cs.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})).Error().NotTo(HaveOccurred())
	patch := client.MergeFrom(s.DeepCopy())
	s.Annotations[bootstrapv1.TokenRefreshUntilAnnotation] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	g.Expect(env.Patch(ctx, s, patch)).To(Succeed())
	g.Eventually(tokenGone(id)).Should(BeTrue(), "the token is deleted once the window has passed")
	g.Eventually(reasonIs(late.Name, bootstrapv1.YonderConfigBootstrapTokenRefreshWindowExpiredReason)).Should(Succeed())
	g.Consistently(func(g Gomega) {
		got := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.Annotations[bootstrapv1.TokenIDAnnotation]).To(Equal(id), "no new token")
	}, 3*time.Second).Should(Succeed())

	sick := newMachine(ctx, g, cluster, "worker-sick", bootstrapv1.YonderConfigSpec{}, nil)
	sickID := dataSecret(ctx, g, cluster.Namespace, sick.Name).Annotations[bootstrapv1.TokenIDAnnotation]
	g.Eventually(func() error {
		m := &clusterv1.Machine{}
		if err := env.Get(ctx, client.ObjectKeyFromObject(sick), m); err != nil {
			return err
		}
		conditions.Set(m, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason})
		return env.Status().Update(ctx, m)
	}).Should(Succeed())
	g.Eventually(tokenGone(sickID)).Should(BeTrue(), "a Machine being remediated loses its token")
	g.Eventually(reasonIs(sick.Name, bootstrapv1.YonderConfigBootstrapTokenMachineRemediatingReason)).Should(Succeed())
	// Each stop is a Warning that says why.
	for name, reason := range map[string]string{late.Name: bootstrapv1.YonderConfigBootstrapTokenRefreshWindowExpiredReason, sick.Name: bootstrapv1.YonderConfigBootstrapTokenMachineRemediatingReason} {
		g.Eventually(func(g Gomega) {
			evs, err := harness.Events(ctx, env.Client, getConfig(ctx, g, cluster.Namespace, name))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(evs).To(ContainElement(HavePrefix("Warning " + reason + ": " + bootstrapv1.YonderConfigBootstrapTokenReadyCondition + " is False: ")))
		}).Should(Succeed())
	}
	// Each ended its bootstrap once, with its own outcome.
	g.Expect(outcome("refresh_window_expired")).To(Equal(expired + 1))
	g.Expect(outcome("remediated")).To(Equal(remediated + 1))

	// A Machine deleted while its host was still bootstrapping ends as deleted; the remediated Machine,
	// deleted as a MachineHealthCheck would, is not counted twice.
	gone := newMachine(ctx, g, cluster, "worker-gone", bootstrapv1.YonderConfigSpec{}, nil)
	dataSecret(ctx, g, cluster.Namespace, gone.Name)
	g.Eventually(func(g Gomega) {
		g.Expect(getConfig(ctx, g, cluster.Namespace, gone.Name).Status.Initialization.DataSecretCreated).To(HaveValue(BeTrue()))
	}).Should(Succeed())
	for _, m := range []*clusterv1.Machine{gone, sick} {
		g.Expect(env.Delete(ctx, m)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: m.Name}, &bootstrapv1.YonderConfig{}))
		}).Should(BeTrue(), m.Name)
	}
	g.Expect(outcome("deleted")).To(Equal(deleted + 1))
	g.Expect(outcome("remediated")).To(Equal(remediated + 1))
}

// outcome reads yonder_bootstrap_outcomes_total{outcome} from the manager's registry.
func outcome(o string) float64 {
	return promread.Sum(metrics.Registry, "yonder_bootstrap_outcomes_total", map[string]string{"outcome": o})
}

// joinSeconds reads yonder_bootstrap_node_join_seconds: how many joins were observed, and their sum.
func joinSeconds() (uint64, float64) {
	mfs, _ := metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "yonder_bootstrap_node_join_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}
