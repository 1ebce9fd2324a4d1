package yondercontrolplane_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/controlplane/reconcilers/yondercontrolplane"
	"github.com/yonder-dev/yonder/test/harness"
)

// attach creates a source kubeconfig Secret, a YonderControlPlane and a Cluster pointing at it.
func attach(ctx context.Context, g *WithT, ns, name string, kubeconfigData []byte, labelled bool) (*clusterv1.Cluster, *controlplanev1.YonderControlPlane) {
	lbl := map[string]string{clusterv1.WatchLabel: watchFilter}
	if !labelled {
		lbl = nil
	}
	if kubeconfigData != nil {
		g.Expect(env.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-admin"},
			Data:       map[string][]byte{"kubeconfig": kubeconfigData},
		})).To(Succeed())
	}
	cp := &controlplanev1.YonderControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec: controlplanev1.YonderControlPlaneSpec{
			KubeconfigSecretRef: controlplanev1.KubeconfigSecretReference{Name: name + "-admin", Key: "kubeconfig"},
		},
	}
	g.Expect(env.Create(ctx, cp)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: controlplanev1.GroupVersion.Group, Kind: "YonderControlPlane", Name: cp.Name,
		}},
	}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	return cluster, cp
}

func getCP(ctx context.Context, g Gomega, cp *controlplanev1.YonderControlPlane) *controlplanev1.YonderControlPlane {
	got := &controlplanev1.YonderControlPlane{}
	g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cp), got)).To(Succeed())
	return got
}

func condition(ctx context.Context, g Gomega, cp *controlplanev1.YonderControlPlane, t string) metav1.Condition {
	c := conditions.Get(getCP(ctx, g, cp), t)
	if c == nil {
		return metav1.Condition{}
	}
	return *c
}

// tokenKubeconfig is a kubeconfig for the workload API server that authenticates with a bearer token.
func tokenKubeconfig(g *WithT, server, token string) []byte {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: workload.CACertPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	b, err := clientcmd.Write(*cfg)
	g.Expect(err).NotTo(HaveOccurred())
	return b
}

// The user story: a Cluster whose control plane is a YonderControlPlane pointing at an existing cluster
// becomes ControlPlaneInitialized in CAPI, gets its endpoint, and CAPI's kubeconfig Secret works.
func TestAttachedClusterBecomesInitialized(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "attach")
	cluster, cp := attach(ctx, g, ns.Name, "edge", workload.AdminKubeconfig, true)

	g.Eventually(func(g Gomega) {
		got := &clusterv1.Cluster{}
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
		g.Expect(got.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
		g.Expect(conditions.IsTrue(got, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue())
		g.Expect(got.Spec.ControlPlaneEndpoint.Host).To(Equal(workload.Host.String()))
		g.Expect(got.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(workload.Port))
	}).Should(Succeed())

	got := getCP(ctx, g, cp)
	g.Expect(got.Status.ExternalManagedControlPlane).To(HaveValue(BeTrue()))
	g.Expect(got.Status.Version).To(HavePrefix("v1.36"))
	for _, c := range []string{controlplanev1.YonderControlPlaneKubeconfigValidCondition, clusterv1.AvailableCondition, controlplanev1.YonderControlPlaneJoinRBACReadyCondition, clusterv1.ReadyCondition} {
		g.Expect(conditions.IsTrue(got, c)).To(BeTrue(), c)
	}
	g.Expect(conditions.IsFalse(got, clusterv1.PausedCondition)).To(BeTrue())

	// "<cluster>-kubeconfig" is in CAPI's format and reaches the workload cluster.
	s := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "edge-kubeconfig"}, s)).To(Succeed())
	g.Expect(s.Type).To(Equal(clusterv1.ClusterSecretType))
	g.Expect(s.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "edge"))
	g.Expect(metav1.GetControllerOf(s)).To(PointTo(MatchFields(IgnoreExtras, Fields{"Kind": Equal("YonderControlPlane"), "Name": Equal("edge")})))
	data, err := kubeconfig.FromSecret(ctx, env.Client, client.ObjectKeyFromObject(cluster))
	g.Expect(err).NotTo(HaveOccurred())
	parsed, err := clientcmd.Load(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.CurrentContext).To(Equal("edge-admin@edge"))
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	g.Expect(err).NotTo(HaveOccurred())
	wl, err := client.New(restCfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	// The join RBAC is installed: bootstrappers may create CSRs, node client CSRs are auto-approved,
	// nodes may renew.
	want := map[string][2]string{
		"yonder:kubelet-bootstrap":                     {"system:node-bootstrapper", "system:bootstrappers"},
		"yonder:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
		"yonder:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	}
	for name, rs := range want {
		crb := &rbacv1.ClusterRoleBinding{}
		g.Expect(wl.Get(ctx, client.ObjectKey{Name: name}, crb)).To(Succeed())
		g.Expect(crb.RoleRef.Name).To(Equal(rs[0]))
		g.Expect(crb.Subjects).To(ConsistOf(MatchFields(IgnoreExtras, Fields{"Kind": Equal("Group"), "Name": Equal(rs[1])})))
	}
	// A bootstrap token's group may create CSRs through those bindings.
	cs, err := kubernetes.NewForConfig(workload.Config)
	g.Expect(err).NotTo(HaveOccurred())
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, subjectAccessReview("system:bootstrap:abcdef", "system:bootstrappers", "create", "certificatesigningrequests"), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sar.Status.Allowed).To(BeTrue())

	// "<cluster>-kubeconfig" deleted by someone is written again.
	g.Expect(env.Delete(ctx, s)).To(Succeed())
	g.Eventually(func() error {
		return env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "edge-kubeconfig"}, &corev1.Secret{})
	}).Should(Succeed())

	// Move labels: the user's Secret is carried by clusterctl move; our CRDs carry the contract label.
	src := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "edge-admin"}, src)).To(Succeed())
	g.Expect(src.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
	g.Expect(src.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "edge"))
	for _, crdName := range []string{"yondercontrolplanes.controlplane.cluster.x-k8s.io", "yondercontrolplanetemplates.controlplane.cluster.x-k8s.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		g.Expect(crd.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", "v1alpha1"))
	}
}

// Rotating the source Secret updates "<cluster>-kubeconfig" — but not while the Cluster is paused.
func TestRotatingTheSourceSecretUpdatesTheClusterKubeconfigUnlessPaused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "rotate")
	cluster, cp := attach(ctx, g, ns.Name, "rot", workload.AdminKubeconfig, true)
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsTrue(getCP(ctx, g, cp), controlplanev1.YonderControlPlaneJoinRBACReadyCondition)).To(BeTrue())
	}).Should(Succeed())

	// A new admin credential: a service account token with cluster-admin in the workload cluster.
	cs, err := kubernetes.NewForConfig(workload.Config)
	g.Expect(err).NotTo(HaveOccurred())
	saName := "rotated-" + strings.TrimPrefix(ns.Name, "rotate-")
	_, err = cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: saName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: saName}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, saName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token

	rotate := func(data []byte) {
		src := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "rot-admin"}, src)).To(Succeed())
		src.Data["kubeconfig"] = data
		g.Expect(env.Update(ctx, src)).To(Succeed())
	}
	clusterKubeconfigToken := func(g Gomega) string {
		data, err := kubeconfig.FromSecret(ctx, env.Client, client.ObjectKeyFromObject(cluster))
		g.Expect(err).NotTo(HaveOccurred())
		cfg, err := clientcmd.Load(data)
		g.Expect(err).NotTo(HaveOccurred())
		return cfg.AuthInfos["rot-admin"].Token
	}
	g.Expect(clusterKubeconfigToken(g)).To(BeEmpty())

	// Paused: the Paused condition is set and the rotation is not picked up.
	setPaused(ctx, g, cluster, true)
	g.Eventually(func(g Gomega) {
		g.Expect(conditions.IsTrue(getCP(ctx, g, cp), clusterv1.PausedCondition)).To(BeTrue())
	}).Should(Succeed())
	rotate(tokenKubeconfig(g, workload.Endpoint, token))
	g.Consistently(clusterKubeconfigToken).Should(BeEmpty())

	// Unpaused: the rotation lands in "<cluster>-kubeconfig" and still works.
	setPaused(ctx, g, cluster, false)
	g.Eventually(clusterKubeconfigToken).Should(Equal(token))
	// Secrets are read from the API server, the YonderControlPlane from the manager's cache, which may
	// not have the Paused=False patch yet when the Secret already shows the rewrite: waited for.
	g.Eventually(func(g Gomega) {
		got := getCP(ctx, g, cp)
		g.Expect(conditions.IsFalse(got, clusterv1.PausedCondition)).To(BeTrue())
		g.Expect(conditions.IsTrue(got, controlplanev1.YonderControlPlaneKubeconfigValidCondition)).To(BeTrue())
	}).Should(Succeed())
	// The rewrite is an Event that names the Secret, never the new token.
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, cp)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElement("Normal " + yondercontrolplane.KubeconfigSecretUpdatedEvent + ": Updated Secret " + ns.Name + "/rot-kubeconfig, the Cluster's kubeconfig, from spec.kubeconfigSecretRef"))
		g.Expect(evs).To(HaveEach(Not(ContainSubstring(token))))
	}).Should(Succeed())
}

func setPaused(ctx context.Context, g *WithT, cluster *clusterv1.Cluster, paused bool) {
	got := &clusterv1.Cluster{}
	g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), got)).To(Succeed())
	p := client.MergeFrom(got.DeepCopy())
	got.Spec.Paused = ptr.To(paused)
	g.Expect(env.Patch(ctx, got, p)).To(Succeed())
}

// A bad kubeconfig gives a KubeconfigValid condition that says what is wrong.
func TestBadKubeconfigsSayWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	execCfg := clientcmdapi.NewConfig()
	execCfg.Clusters["c"] = &clientcmdapi.Cluster{Server: workload.Endpoint, CertificateAuthorityData: workload.CACertPEM}
	execCfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "aws", APIVersion: "client.authentication.k8s.io/v1"}}
	execCfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	execCfg.CurrentContext = "x"
	execData, err := clientcmd.Write(*execCfg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	for _, tc := range []struct {
		name    string
		data    func(g *WithT) []byte
		reason  string
		message string
	}{
		{"missing-secret", func(*WithT) []byte { return nil }, controlplanev1.YonderControlPlaneKubeconfigSecretNotFoundReason, "does not exist"},
		{"garbage", func(*WithT) []byte { return []byte("{not: a kubeconfig") }, controlplanev1.YonderControlPlaneKubeconfigInvalidReason, "does not hold a kubeconfig"},
		{"exec-plugin", func(*WithT) []byte { return execData }, controlplanev1.YonderControlPlaneKubeconfigUnsupportedAuthReason, "exec plugin (aws)"},
		{"wrong-token", func(g *WithT) []byte { return tokenKubeconfig(g, workload.Endpoint, "not-a-valid-token") }, controlplanev1.YonderControlPlaneKubeconfigUnauthorizedReason, "rejected the kubeconfig's credentials"},
		{"unreachable", func(g *WithT) []byte { return tokenKubeconfig(g, "https://127.0.0.1:1", "x") }, controlplanev1.YonderControlPlaneKubeconfigUnreachableReason, "did not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := env.CreateNamespace(ctx, t, "bad")
			cluster, cp := attach(ctx, g, ns.Name, "bad", tc.data(g), true)
			g.Eventually(func(g Gomega) {
				c := condition(ctx, g, cp, controlplanev1.YonderControlPlaneKubeconfigValidCondition)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(tc.reason))
				g.Expect(c.Message).To(ContainSubstring(tc.message))
			}).Should(Succeed())
			got := getCP(ctx, g, cp)
			g.Expect(conditions.IsFalse(got, clusterv1.AvailableCondition)).To(BeTrue())
			g.Expect(got.Status.Initialization.ControlPlaneInitialized).To(BeNil())
			c := &clusterv1.Cluster{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(cluster), c)).To(Succeed())
			g.Expect(ptr.Deref(c.Status.Initialization.ControlPlaneInitialized, false)).To(BeFalse())
		})
	}
}

// A credential that authenticates but may not create ClusterRoleBindings: the cluster is attached and
// available, JoinRBACReady says what is missing.
func TestCredentialWithoutRBACRightsReportsJoinRBACFailure(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "norbac")
	cs, err := kubernetes.NewForConfig(workload.Config)
	g.Expect(err).NotTo(HaveOccurred())
	saName := "viewer-" + strings.TrimPrefix(ns.Name, "norbac-")
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, saName, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, cp := attach(ctx, g, ns.Name, "norbac", tokenKubeconfig(g, workload.Endpoint, tr.Status.Token), true)
	g.Eventually(func(g Gomega) {
		c := condition(ctx, g, cp, controlplanev1.YonderControlPlaneJoinRBACReadyCondition)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(controlplanev1.YonderControlPlaneJoinRBACFailedReason))
		g.Expect(c.Message).To(ContainSubstring("forbidden"))
	}).Should(Succeed())
	// CAPI's patch helper writes conditions before the rest of status: wait for both.
	g.Eventually(func(g Gomega) {
		got := getCP(ctx, g, cp)
		g.Expect(conditions.IsTrue(got, controlplanev1.YonderControlPlaneKubeconfigValidCondition)).To(BeTrue())
		g.Expect(conditions.IsTrue(got, clusterv1.AvailableCondition)).To(BeTrue())
		g.Expect(got.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
		g.Expect(conditions.IsFalse(got, clusterv1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())
}

// Objects without the manager's watch-filter label are left alone.
func TestWatchFilterIgnoresUnlabelledObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "filter")
	_, cp := attach(ctx, g, ns.Name, "other", workload.AdminKubeconfig, false)
	g.Consistently(func(g Gomega) {
		got := getCP(ctx, g, cp)
		g.Expect(got.Status.Conditions).To(BeEmpty())
		g.Expect(got.Status.Initialization.ControlPlaneInitialized).To(BeNil())
	}).Should(Succeed())
}

// Invalid specs are rejected by the API server with field paths; templates are immutable except for
// ClusterClass dry-runs.
func TestAdmission(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "admission")

	bad := &controlplanev1.YonderControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bad"},
		Spec:       controlplanev1.YonderControlPlaneSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1"}},
	}
	err := env.Create(ctx, bad)
	g.Expect(err).To(MatchError(ContainSubstring("spec.controlPlaneEndpoint.port: Invalid value")))
	bad.Spec = controlplanev1.YonderControlPlaneSpec{KubeconfigSecretRef: controlplanev1.KubeconfigSecretReference{Name: "Not_A_Name"}}
	g.Expect(env.Create(ctx, bad)).To(MatchError(ContainSubstring("spec.kubeconfigSecretRef.name")))

	// Defaulting fills the key.
	ok := &controlplanev1.YonderControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "ok"}}
	g.Expect(env.Create(ctx, ok)).To(Succeed())
	g.Expect(ok.Spec.KubeconfigSecretRef.Key).To(Equal("value"))
	// The endpoint is immutable once set.
	ok.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "a.example", Port: 6443}
	g.Expect(env.Update(ctx, ok)).To(Succeed())
	ok.Spec.ControlPlaneEndpoint.Port = 443
	g.Expect(env.Update(ctx, ok)).To(MatchError(ContainSubstring("spec.controlPlaneEndpoint: Forbidden")))

	tmpl := &controlplanev1.YonderControlPlaneTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "tmpl"},
		Spec: controlplanev1.YonderControlPlaneTemplateSpec{Template: controlplanev1.YonderControlPlaneTemplateResource{
			Spec: controlplanev1.YonderControlPlaneSpec{KubeconfigSecretRef: controlplanev1.KubeconfigSecretReference{Name: "a"}},
		}},
	}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	tmpl.Spec.Template.Spec.KubeconfigSecretRef.Name = "b"
	g.Expect(env.Update(ctx, tmpl)).To(MatchError(ContainSubstring("spec.template.spec: Forbidden")))
	// The ClusterClass controller's dry-run of a changed template is allowed (and persists nothing).
	tmpl.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	g.Expect(env.Update(ctx, tmpl, client.DryRunAll)).To(Succeed())
	got := &controlplanev1.YonderControlPlaneTemplate{}
	g.Expect(env.Get(ctx, client.ObjectKeyFromObject(tmpl), got)).To(Succeed())
	g.Expect(got.Spec.Template.Spec.KubeconfigSecretRef.Name).To(Equal("a"))
	// Metadata-only changes are fine.
	got.Labels = map[string]string{"team": "edge"}
	g.Expect(env.Update(ctx, got)).To(Succeed())
}

// A YonderControlPlane pointed at another Cluster's Secret — labelled with that Cluster's name, or
// owned by that Cluster — neither reads it (the Cluster is not attached with that cluster's credentials,
// no "<cluster>-kubeconfig" is written) nor relabels it; KubeconfigValid says whose it is.
func TestForeignKubeconfigSecretIsNeitherReadNorRelabelled(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		meta func(victim *clusterv1.Cluster) metav1.ObjectMeta
	}{
		{"labelled", func(*clusterv1.Cluster) metav1.ObjectMeta {
			return metav1.ObjectMeta{Labels: map[string]string{clusterv1.ClusterNameLabel: "victim"}}
		}},
		{"owned", func(v *clusterv1.Cluster) metav1.ObjectMeta {
			return metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: v.Name, UID: v.UID}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := env.CreateNamespace(ctx, t, "foreign").Name
			victim := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"},
				Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "YonderControlPlane", Name: "victim"}}}
			g.Expect(env.Create(ctx, victim)).To(Succeed())
			foreign := &corev1.Secret{ObjectMeta: tc.meta(victim), Data: map[string][]byte{"kubeconfig": workload.AdminKubeconfig}}
			foreign.Namespace, foreign.Name = ns, "victim-kubeconfig"
			g.Expect(env.Create(ctx, foreign)).To(Succeed())
			before := foreign.DeepCopy()

			cp := &controlplanev1.YonderControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief", Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
				Spec: controlplanev1.YonderControlPlaneSpec{KubeconfigSecretRef: controlplanev1.KubeconfigSecretReference{Name: foreign.Name, Key: "kubeconfig"}}}
			g.Expect(env.Create(ctx, cp)).To(Succeed())
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief", Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
				Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "YonderControlPlane", Name: cp.Name}}}
			g.Expect(env.Create(ctx, cluster)).To(Succeed())

			g.Eventually(func(g Gomega) {
				c := condition(ctx, g, cp, controlplanev1.YonderControlPlaneKubeconfigValidCondition)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(controlplanev1.YonderControlPlaneKubeconfigSecretForeignReason))
				g.Expect(c.Message).To(ContainSubstring("Secret " + ns + "/victim-kubeconfig belongs to Cluster victim"))
			}).Should(Succeed())
			got := getCP(ctx, g, cp)
			g.Expect(got.Status.Initialization.ControlPlaneInitialized).To(BeNil())
			g.Expect(got.Status.Version).To(BeEmpty(), "the foreign credentials never reached the API server")
			after := &corev1.Secret{}
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(foreign), after)).To(Succeed())
			g.Expect(after.Labels).To(Equal(before.Labels), "not relabelled")
			g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "thief-kubeconfig"}, &corev1.Secret{})).To(MatchError(ContainSubstring("not found")))
			if tc.name != "labelled" {
				return
			}
			// Once its Cluster is gone, the label left on the user's Secret holds nothing: the next
			// Cluster that names the Secret takes it over.
			g.Expect(env.Delete(ctx, victim)).To(Succeed())
			g.Eventually(func(g Gomega) {
				c := condition(ctx, g, cp, controlplanev1.YonderControlPlaneKubeconfigValidCondition)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
				s := &corev1.Secret{}
				g.Expect(env.Get(ctx, client.ObjectKeyFromObject(foreign), s)).To(Succeed())
				g.Expect(s.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "thief"))
			}).Should(Succeed())
		})
	}
}
