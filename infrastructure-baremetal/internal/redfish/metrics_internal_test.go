package redfish

import (
	"context"
	"errors"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

// Every request the client sends maps to one operation of a fixed set, whatever the system, session or
// member IDs in its path; requests the client does not send fall into "other".
func TestOperation(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{http.MethodGet, "/redfish/v1/", OpServiceRoot},
		{http.MethodGet, "/redfish/v1", OpServiceRoot},
		{http.MethodGet, "/redfish", OpServiceRoot},
		{http.MethodPost, "/redfish/v1/SessionService/Sessions", OpSessionCreate},
		{http.MethodPost, "/redfish/v1/SessionService/Sessions/", OpSessionCreate},
		{http.MethodDelete, "/redfish/v1/SessionService/Sessions/8f1c2a", OpSessionDelete},
		{http.MethodGet, "/redfish/v1/Systems", OpListSystems},
		{http.MethodGet, "/redfish/v1/Systems/437XR1138R2", OpGetSystem},
		{http.MethodGet, "/redfish/v1/systems/System.Embedded.1/", OpGetSystem},
		{http.MethodPatch, "/redfish/v1/Systems/1", OpBootOverride},
		{http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", OpReset},
		{http.MethodGet, "/redfish/v1/Systems/1/Processors", OpInventory},
		{http.MethodGet, "/redfish/v1/Systems/1/Memory/DIMM3", OpInventory},
		{http.MethodGet, "/redfish/v1/Systems/1/Storage/1/Drives/0", OpInventory},
		{http.MethodGet, "/redfish/v1/Chassis/1U/PCIeDevices/GPU0", OpInventory},
		{http.MethodGet, "/redfish/v1/SessionService", OpOther},
		{http.MethodDelete, "/redfish/v1/Systems/1", OpOther},
		{http.MethodPost, "/redfish/v1/Systems/1/Actions/ComputerSystem.SetDefaultBootOrder", OpOther},
		{http.MethodGet, "/redfish/v1/Managers/BMC", OpOther},
		{http.MethodGet, "/api/something", OpOther},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			NewWithT(t).Expect(operation(tc.method, tc.path)).To(Equal(tc.want))
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestCode(t *testing.T) {
	g := NewWithT(t)
	g.Expect(code(&http.Response{StatusCode: http.StatusNoContent}, nil)).To(Equal("204"))
	g.Expect(code(&http.Response{StatusCode: http.StatusUnauthorized}, nil)).To(Equal("401"))
	g.Expect(code(nil, timeoutErr{})).To(Equal(CodeTimeout))
	g.Expect(code(nil, context.DeadlineExceeded)).To(Equal(CodeTimeout))
	g.Expect(code(nil, errors.New("connection refused"))).To(Equal(CodeError))
}
