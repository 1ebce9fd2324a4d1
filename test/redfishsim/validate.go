package redfishsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// RequestError is the error a Redfish service answers a request it refuses with: the HTTP status and a
// message of DMTF's Base registry (MessageId "Base.1.x.<Key>").
type RequestError struct {
	Status    int
	MessageID string
	Message   string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.MessageID, e.Message)
}

// Write answers the request with the error, as writeError does.
func (e *RequestError) Write(w http.ResponseWriter) { writeError(w, e.Status, e.MessageID, e.Message) }

func badRequest(key, format string, args ...any) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, MessageID: "Base.1.0." + key, Message: fmt.Sprintf(format, args...)}
}

// ComputerSystemWritable lists the ComputerSystem properties DMTF's schema (ComputerSystem v1_20) marks
// writable that a PATCH of the system may carry; a path names a property inside an object ("Boot/…").
// Everything else a system publishes is read-only: PowerState changes through the Reset action, not a PATCH.
var ComputerSystemWritable = []string{
	"AssetTag", "HostName", "IndicatorLED", "LocationIndicatorActive", "PowerRestorePolicy",
	"Boot/BootSourceOverrideEnabled", "Boot/BootSourceOverrideTarget", "Boot/BootSourceOverrideMode",
	"Boot/UefiTargetBootSourceOverride", "Boot/BootNext", "Boot/BootOrder", "Boot/AutomaticRetryConfig",
	"Boot/AutomaticRetryAttempts", "Boot/HttpBootUri", "Boot/StopBootOnFault", "Boot/TrustedModuleRequiredToBoot",
}

// schemaEnums are the values DMTF's schema allows for enumerated writable properties, which a resource
// need not repeat as @Redfish.AllowableValues (a service narrows them by publishing that annotation).
var schemaEnums = map[string][]string{
	"Boot/BootSourceOverrideEnabled": {"Disabled", "Once", "Continuous"},
	"Boot/BootSourceOverrideMode":    {"Legacy", "UEFI"},
	"Boot/BootSourceOverrideTarget": {"None", "Pxe", "Floppy", "Cd", "Usb", "Hdd", "BiosSetup", "Utilities", "Diags",
		"UefiShell", "UefiTarget", "SDCard", "UefiHttp", "RemoteDrive", "UefiBootNext", "Recovery"},
	"Boot/AutomaticRetryConfig": {"Disabled", "RetryAttempts", "RetryAlways"},
	"IndicatorLED":              {"Lit", "Blinking", "Off"},
	"PowerRestorePolicy":        {"AlwaysOn", "AlwaysOff", "LastState"},
}

// CheckJSONBody refuses a request body that is not declared as JSON (RFC 7231 415), as BMCs do.
func CheckJSONBody(r *http.Request) *RequestError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &RequestError{Status: http.StatusUnsupportedMediaType, MessageID: "Base.1.0.UnsupportedMediaType",
			Message: fmt.Sprintf("the request body must be application/json, not %q", r.Header.Get("Content-Type"))}
	}
	return nil
}

// ValidatePatch checks a PATCH body against the resource document it changes, as a BMC does before it
// applies anything: the body is one JSON object; every property in it exists in the resource
// (PropertyUnknown: the service does not implement it), is writable — its path is in writable, or it is an
// object holding writable properties (PropertyNotWritable) — has the JSON type of the resource's value
// (PropertyValueTypeError), and an enumerated value is one of the resource's @Redfish.AllowableValues, or
// of the schema's values where the resource publishes none (PropertyValueNotInList).
func ValidatePatch(resource map[string]any, body []byte, writable []string) *RequestError {
	var patch map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&patch); err != nil || patch == nil {
		return badRequest("MalformedJSON", "the request body is not one JSON object")
	}
	if len(patch) == 0 {
		return badRequest("EmptyJSON", "the request body holds no properties to change")
	}
	return validateObject(resource, patch, "", writable)
}

func validateObject(resource, patch map[string]any, prefix string, writable []string) *RequestError {
	for _, k := range sortedKeys(patch) {
		path := prefix + k
		current, ok := resource[k]
		if !ok || strings.HasPrefix(k, "@") || strings.Contains(k, "@") {
			if ok {
				return badRequest("PropertyNotWritable", "the property %s is read-only", path)
			}
			return badRequest("PropertyUnknown", "the property %s is not supported by this resource", path)
		}
		if !slices.Contains(writable, path) {
			sub, isObject := current.(map[string]any)
			if !isObject || !holdsWritable(path, writable) {
				return badRequest("PropertyNotWritable", "the property %s is read-only", path)
			}
			p, ok := patch[k].(map[string]any)
			if !ok {
				return badRequest("PropertyValueTypeError", "the property %s takes an object, not %s", path, JSONType(patch[k]))
			}
			if err := validateObject(sub, p, path+"/", writable); err != nil {
				return err
			}
			continue
		}
		if current != nil && JSONType(current) != JSONType(patch[k]) {
			return badRequest("PropertyValueTypeError", "the property %s takes a %s, not %s", path, JSONType(current), JSONType(patch[k]))
		}
		allowed := schemaEnums[path]
		if av, ok := resource[k+"@Redfish.AllowableValues"].([]any); ok {
			allowed = []string{} // the service's list replaces the schema's, even when empty
			for _, v := range av {
				if s, ok := v.(string); ok {
					allowed = append(allowed, s)
				}
			}
		}
		if s, isString := patch[k].(string); isString && allowed != nil && !slices.Contains(allowed, s) {
			return badRequest("PropertyValueNotInList", "the value %q of %s is not one of %s", s, path, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// ValidateAction checks an action's POST body against the action as the resource advertises it in its
// Actions (name like "#ComputerSystem.Reset"): the action exists (ActionNotSupported), the body is one
// JSON object, each parameter is one the action declares through "<Parameter>@Redfish.AllowableValues"
// (ActionParameterUnknown), each required parameter is there (ActionParameterMissing) and each value is
// allowed (ActionParameterValueNotInList).
func ValidateAction(resource map[string]any, name string, body []byte, required ...string) *RequestError {
	actions, _ := resource["Actions"].(map[string]any)
	action, ok := actions[name].(map[string]any)
	if !ok {
		return badRequest("ActionNotSupported", "the resource does not support the action %s", name)
	}
	var params map[string]any
	if err := json.Unmarshal(body, &params); err != nil || params == nil {
		return badRequest("MalformedJSON", "the body of %s is not one JSON object", name)
	}
	for _, p := range required {
		if _, ok := params[p]; !ok {
			return badRequest("ActionParameterMissing", "the action %s requires the parameter %s", name, p)
		}
	}
	for _, p := range sortedKeys(params) {
		av, declared := action[p+"@Redfish.AllowableValues"].([]any)
		if !declared {
			return badRequest("ActionParameterUnknown", "the action %s has no parameter %s", name, p)
		}
		s, isString := params[p].(string)
		if !isString {
			return badRequest("ActionParameterValueTypeError", "the parameter %s of %s takes a string, not %s", p, name, JSONType(params[p]))
		}
		if !slices.ContainsFunc(av, func(v any) bool { return v == s }) {
			return badRequest("ActionParameterValueNotInList", "the value %q of %s is not one %s allows (%v)", s, p, name, av)
		}
	}
	return nil
}

// ETag is the entity tag of a resource document: a weak tag of its content, as BMCs derive theirs, so it
// changes whenever anything the document says changes (power state, boot override…).
func ETag(doc map[string]any) string {
	clean := make(map[string]any, len(doc))
	for k, v := range doc {
		if k != "@odata.etag" {
			clean[k] = v
		}
	}
	b, _ := json.Marshal(clean) // maps marshal with sorted keys: the same content, the same tag
	return fmt.Sprintf(`W/"%012x"`, hash(string(b)))
}

// CheckIfMatch refuses a change whose If-Match names another version of the resource than etag (RFC 7232
// 412): the client read the resource before it last changed. A request without If-Match is accepted, as
// the Redfish specification allows.
func CheckIfMatch(r *http.Request, etag string) *RequestError {
	m := r.Header.Get("If-Match")
	if m == "" || m == "*" {
		return nil
	}
	weak := func(t string) string { return strings.TrimPrefix(strings.TrimSpace(t), "W/") }
	for _, t := range strings.Split(m, ",") {
		if weak(t) == weak(etag) {
			return nil
		}
	}
	return &RequestError{Status: http.StatusPreconditionFailed, MessageID: "Base.1.0.PreconditionFailed",
		Message: fmt.Sprintf("If-Match %s does not match the resource's current ETag %s: read it again", m, etag)}
}

func holdsWritable(path string, writable []string) bool {
	return slices.ContainsFunc(writable, func(w string) bool { return strings.HasPrefix(w, path+"/") })
}

// JSONType names the JSON type of a decoded JSON value (or of the Go values a document is built from):
// string, number, boolean, array, object or null.
func JSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, json.Number, int, int64:
		return "number"
	case []any, []string:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
