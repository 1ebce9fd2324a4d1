package agent

import "encoding/base64"

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
