package baremetalhost

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Flag values that refuse a meaningless setting while the command line is parsed, so the manager stops
// with the flag's name and the allowed range instead of running with a limit that does nothing.

// positiveFloatValue is a finite float above zero.
type positiveFloatValue struct{ p *float64 }

func (v *positiveFloatValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v *positiveFloatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	if f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("%s must be a number above 0", s)
	}
	*v.p = f
	return nil
}

func (*positiveFloatValue) Type() string { return "float" }

// intRangeValue is an integer in [min, max].
type intRangeValue struct {
	p        *int
	min, max int
}

func (v *intRangeValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v *intRangeValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	if n < v.min || n > v.max {
		return fmt.Errorf("%d is outside %d-%d", n, v.min, v.max)
	}
	*v.p = n
	return nil
}

func (*intRangeValue) Type() string { return "int" }

// durationRangeValue is a duration in [min, max].
type durationRangeValue struct {
	p        *time.Duration
	min, max time.Duration
}

func (v *durationRangeValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v *durationRangeValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 10m)", s)
	}
	if d < v.min || d > v.max {
		return fmt.Errorf("%s is outside %s-%s", d, v.min, v.max)
	}
	*v.p = d
	return nil
}

func (*durationRangeValue) Type() string { return "duration" }

// configMapRefValue is a ConfigMap's <namespace>/<name>, or empty (none).
type configMapRefValue struct{ p *string }

func (v *configMapRefValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v *configMapRefValue) Set(s string) error {
	if s != "" {
		if _, err := ParseConfigMapRef(s); err != nil {
			return err
		}
	}
	*v.p = s
	return nil
}

func (*configMapRefValue) Type() string { return "namespace/name" }
