package attest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

// PathReport is where the provisioning ramdisk reports the outcome of the work its instructions named
// (POST, a Report): the controller waits for it before it boots the host from its disk, or before it
// counts the host's disks as cleaned.
const PathReport = "/provisioning/v1/report"

// InstructionsVersion marks the plaintext of a released envelope as Instructions of this version.
const InstructionsVersion = "yonder.dev/instructions/v1"

// Actions a released envelope can name.
const (
	// ActionLive (format live-iso): nothing to do. The attestation proved the host; the controller then
	// switches it to SAN-boot its live ISO from the boot server. As in Metal3, no user data is released
	// for a live ISO, and nothing is written to disk.
	ActionLive = "live"
	// ActionWriteImage: write Image to the root disk RootDeviceHints choose, add a config drive with
	// UserData, MetaData and NetworkData, report, and wait for the controller to boot the host from disk.
	ActionWriteImage = "write-image"
	// ActionClean: remove the partition tables and filesystem signatures of every disk
	// (automatedCleaningMode metadata), report, and wait to be powered off.
	ActionClean = "clean"
	// ActionRunNode: the diskless deploy method (customDeploy yonder-diskless). The ramdisk runs the
	// UserData (Yonder's cloud-config: write_files and runcmd) itself, with the providerid of MetaData,
	// so that the agent and the Node live in its memory; it reports once the agent's bootstrap finished
	// (the Node joined) or failed, and keeps running. Nothing is written to disk.
	ActionRunNode = "run-node"
)

// Instructions are the plaintext of a released envelope: what this attested host is to do, and the data
// it needs for it. They travel inside the TPM-bound, provider-signed envelope, so a rogue server on the
// boot LAN can neither read them nor make a host write another image.
type Instructions struct {
	Version string `json:"version"`
	Action  string `json:"action"`
	// UserData is the bootstrap data (the BareMetalHost's spec.userData): run by the ramdisk
	// (ActionRunNode) or put on the config drive as openstack/latest/user_data (ActionWriteImage).
	UserData []byte `json:"userData,omitempty"`
	// MetaData and NetworkData are the config drive's meta_data.json and network_data.json (JSON).
	MetaData    json.RawMessage `json:"metaData,omitempty"`
	NetworkData json.RawMessage `json:"networkData,omitempty"`
	// Image and RootDeviceHints are the BareMetalHost's spec.image and spec.rootDeviceHints.
	Image           *metal3v1.Image           `json:"image,omitempty"`
	RootDeviceHints *metal3v1.RootDeviceHints `json:"rootDeviceHints,omitempty"`
	// Host ("<namespace>/<name>") and ReportToken authenticate the Report of this action: the token is
	// drawn for this release only and is known to nobody but the attested TPM's host.
	Host        string `json:"host,omitempty"`
	ReportToken string `json:"reportToken,omitempty"`
}

// DecodeInstructions parses a released envelope's plaintext. Unknown fields are refused: an agent older
// than its provider must not silently skip part of its work.
func DecodeInstructions(plain []byte) (*Instructions, error) {
	in := &Instructions{}
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return nil, fmt.Errorf("the released data are not provisioning instructions (is the boot image older than the provider?): %w", err)
	}
	if in.Version != InstructionsVersion {
		return nil, fmt.Errorf("the released instructions are version %q; this agent reads %q: rebuild the boot image from the provider's release", in.Version, InstructionsVersion)
	}
	switch in.Action {
	case ActionLive:
	case ActionWriteImage:
		if in.Image == nil || in.Image.URL == "" {
			return nil, errors.New("the instructions say write-image but name no image")
		}
		if in.ReportToken == "" || in.Host == "" {
			return nil, errors.New("the instructions say write-image but carry no report token")
		}
	case ActionClean:
		if in.ReportToken == "" || in.Host == "" {
			return nil, errors.New("the instructions say clean but carry no report token")
		}
	case ActionRunNode:
		if len(in.UserData) == 0 {
			return nil, errors.New("the instructions say run-node but carry no user data")
		}
		if in.ReportToken == "" || in.Host == "" {
			return nil, errors.New("the instructions say run-node but carry no report token")
		}
	default:
		return nil, fmt.Errorf("unknown action %q in the released instructions", in.Action)
	}
	return in, nil
}

// Report is the ramdisk's outcome of ActionWriteImage, ActionClean or ActionRunNode.
type Report struct {
	Host   string `json:"host"`
	Token  string `json:"token"`
	Action string `json:"action"`
	// Success is false when the work failed; Message then says why (it is shown in the host's
	// condition, so it must not carry secrets: image URLs are not secrets, user data is never in it).
	Success bool   `json:"success"`
	Message string `json:"message,omitempty"`
	// Device is the disk written (ActionWriteImage); Bytes the image's size on it.
	Device string `json:"device,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Duration is how long the work took.
	Duration string `json:"duration,omitempty"`
}

// ReportResponse is the server's acknowledgement.
type ReportResponse struct {
	Recorded bool `json:"recorded"`
}

// Report sends r, retrying (with the 429 budget of every request, then every 5 s for a minute) when the
// server cannot be reached: the work is done, losing its report would cost the whole provisioning attempt.
// A refusal (a wrong or used token) is returned at once.
func (c *Client) Report(ctx context.Context, r Report) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var rsp ReportResponse
		err := c.do(ctx, http.MethodPost, PathReport, r, &rsp)
		var refused *RefusedError
		if err == nil || errors.As(err, &refused) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(5 * time.Second):
		}
	}
}

// Reasons of report refusals.
const (
	// ReasonUnknownReportToken: no report is expected from this host with this token (a stranger, a
	// replay, or a second report of the same work).
	ReasonUnknownReportToken = "UnknownReportToken"
)
