package converge

import "encoding/json"

// MarshalJSON writes an attempt's outcome, null for an attempt still in
// flight (no outcome yet): the outcomes of SPEC §2 are only succeeded,
// transient_error, permanent_error, cancelled and abandoned, never "".
func (o AttemptOutcome) MarshalJSON() ([]byte, error) {
	if o == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(o))
}
