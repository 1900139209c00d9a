package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestDeadLetterBulkInvalidFields: the store's own checks of a bulk action
// and a purge are validation errors naming their field (SPEC §4), as the
// API's are, for callers that reach it without the API's decoding.
func TestDeadLetterBulkInvalidFields(t *testing.T) {
	t.Parallel()
	st := newWF(t).st
	tooMany := make([]uuid.UUID, converge.MaxDeadLetterBulk+1)
	for i := range tooMany {
		tooMany[i] = uuid.New()
	}
	_, neither := st.DeadLetterRedriveMany(t.Context(), store.DeadLetterBulkParams{})
	_, both := st.DeadLetterDiscardMany(t.Context(), store.DeadLetterBulkParams{IDs: tooMany[:1], Filter: &converge.DeadLetterFilter{}})
	_, many := st.DeadLetterDiscardMany(t.Context(), store.DeadLetterBulkParams{IDs: tooMany})
	_, negative := st.DeadLetterPurge(t.Context(), store.DeadLetterPurgeParams{OlderThan: -time.Hour})
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{{"neither ids nor filter", neither, "ids"}, {"both", both, "ids"}, {"1001 ids", many, "ids"}, {"negative older_than", negative, "older_than"}} {
		var ae *converge.AppError
		if !errors.As(c.err, &ae) || ae.Code != converge.EINVALID || len(ae.Fields) != 1 || ae.Fields[0].Field != c.field {
			t.Errorf("%s: %v, want invalid-request naming %s", c.name, c.err, c.field)
		}
	}
}
