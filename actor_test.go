package converge_test

import (
	"context"
	"testing"

	"github.com/converge-run/converge"
)

func TestActorContext(t *testing.T) {
	t.Parallel()
	if a := converge.ActorFrom(t.Context()); a != nil {
		t.Fatalf("actor %+v in a bare context", a)
	}
	a := &converge.Actor{Name: "oncall", Role: converge.RoleOperator}
	if got := converge.ActorFrom(converge.WithActor(t.Context(), a)); got != a {
		t.Fatalf("ActorFrom = %+v, want %+v", got, a)
	}
	// A value set under a look-alike key is not an actor.
	type actorKey struct{}
	if got := converge.ActorFrom(context.WithValue(t.Context(), actorKey{}, a)); got != nil {
		t.Fatalf("ActorFrom took %+v from a foreign key", got)
	}
}
