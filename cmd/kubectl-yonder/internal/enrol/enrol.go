// Package enrol implements `kubectl yonder host enrol`: it opens (or closes) a BareMetalHost's bounded TPM
// enrolment window, the annotation with an RFC 3339 deadline until which the host's next attested boot may
// pin its TPM (docs/metal-boot.md). Nothing else opens it: enrolment is an operator's decision.
package enrol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// The BareMetalHost annotations the command writes and reads (the provider's baremetalhost package
// defines them; the released plugin does not link the provider).
const (
	WindowAnnotation    = "metal.yonder.dev/tpm-enrolment-window"
	PinnedAnnotation    = "metal.yonder.dev/tpm-enrolment"
	EKSHA256Annotation  = "metal.yonder.dev/tpm-ek-sha256"
	managedLabel        = "metal.yonder.dev/managed"
	defaultWindowLength = 30 * time.Minute
)

var bmhGVK = schema.GroupVersionKind{Group: "metal3.io", Version: "v1alpha1", Kind: "BareMetalHost"}

// Options are the flags of `host enrol`.
type Options struct {
	For   time.Duration
	Close bool
	// Now is the clock (tests).
	Now func() time.Time
}

// AddTo adds `enrol` to the plugin's `host` command and returns it (one registration line in main.go).
func AddTo(host *cobra.Command, o *cli.Options) *cobra.Command {
	host.AddCommand(NewCommand(o))
	return host
}

// NewCommand returns `enrol`.
func NewCommand(o *cli.Options) *cobra.Command {
	eo := &Options{}
	cmd := &cobra.Command{
		Use:   "enrol BAREMETALHOST|NAMESPACE/BAREMETALHOST",
		Short: "Open a bare-metal host's TPM enrolment window for a bounded time (or --close it)",
		Long: "Opens the TPM enrolment window of a Yonder-managed BareMetalHost: until the deadline, the host's next attested\n" +
			"PXE boot may pin its TPM (its EK must still chain to the manager's --ek-roots). The first pin closes the window.\n" +
			"Hosts whose EK is registered out of band (annotation " + EKSHA256Annotation + ") need no window.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return eo.Run(cmd.Context(), o, args[0]) },
	}
	cmd.Flags().DurationVar(&eo.For, "for", defaultWindowLength, fmt.Sprintf("how long the window stays open (at most %s)", infrav1.MaxEnrolmentWindow))
	cmd.Flags().BoolVar(&eo.Close, "close", false, "close the host's window instead")
	return cmd
}

// Run opens or closes the window of the named host.
func (eo *Options) Run(ctx context.Context, o *cli.Options, ref string) error {
	if !eo.Close && (eo.For <= 0 || eo.For > infrav1.MaxEnrolmentWindow) {
		return fmt.Errorf("--for %s: the window must be open for more than 0 and at most %s", eo.For, infrav1.MaxEnrolmentWindow)
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		var err error
		if ns, err = o.Ns(); err != nil {
			return err
		}
		name = ref
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not BAREMETALHOST or NAMESPACE/BAREMETALHOST", ref)
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	h := &unstructured.Unstructured{}
	h.SetGroupVersionKind(bmhGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, h); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("BareMetalHost %s/%s does not exist", ns, name)
		}
		return fmt.Errorf("failed to read BareMetalHost %s/%s: %w", ns, name, err)
	}
	if h.GetLabels()[managedLabel] != "true" {
		return fmt.Errorf("BareMetalHost %s/%s is not managed by Yonder (label %s=true): its enrolment is not Yonder's", ns, name, managedLabel)
	}
	var value any // nil removes the annotation
	if !eo.Close {
		if _, pinned := h.GetAnnotations()[PinnedAnnotation]; pinned {
			return errors.New("BareMetalHost " + ns + "/" + name + " already has a pinned TPM: to enrol a replaced TPM, remove annotation " +
				PinnedAnnotation + " first (then the next attested boot in the window pins the new one)")
		}
		now := time.Now
		if eo.Now != nil {
			now = eo.Now
		}
		value = now().Add(eo.For).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": h.GetResourceVersion(), // no window opened on a host that changed since it was read
		"annotations":     map[string]any{WindowAnnotation: value}}})
	if err := c.Patch(ctx, h, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("failed to update BareMetalHost %s/%s: %w", ns, name, err)
	}
	if eo.Close {
		_, _ = fmt.Fprintf(o.Out, "BareMetalHost %s/%s: TPM enrolment window closed\n", ns, name)
		return nil
	}
	_, _ = fmt.Fprintf(o.Out, "BareMetalHost %s/%s: TPM enrolment window open until %s\n", ns, name, value)
	return nil
}
