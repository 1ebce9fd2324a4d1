package yondercontrolplane

import (
	"strings"
	"testing"
)

func TestReleaseVersionDropsVendorTags(t *testing.T) {
	for in, want := range map[string]string{
		"v1.36.3":             "v1.36.3",
		"v1.30.4-eks-a737599": "v1.30.4",
		"v1.31.2+k3s1":        "v1.31.2",
		"v1.30.5-gke.1014001": "v1.30.5",
		"1.29.0":              "v1.29.0",
	} {
		got, err := releaseVersion(in)
		if err != nil || got != want {
			t.Errorf("releaseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := releaseVersion("latest"); err == nil || !strings.Contains(err.Error(), `failed to parse the API server version "latest"`) {
		t.Errorf("releaseVersion(latest) = %v; want an error naming the version", err)
	}
}
