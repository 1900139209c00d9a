package converge

import "context"

// Actor is who makes a request.
type Actor struct {
	Name string
	Role Role
}

// actorKey is the context key of the actor; unexported, so that only
// WithActor can set it.
type actorKey struct{}

// WithActor returns ctx carrying a, the authenticated actor of a request.
// Only an edge that has authenticated a (the API's bearer token check, the
// dashboard's session) may call it; nothing trusts an actor found in a
// context in place of authenticating.
func WithActor(ctx context.Context, a *Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor WithActor put into ctx, or nil.
func ActorFrom(ctx context.Context) *Actor {
	a, _ := ctx.Value(actorKey{}).(*Actor)
	return a
}
