package api

import "github.com/postingsvc/posting/internal/write/reservation"

// PostJSON is a post as the API shows it; the admin console's recent posts
// share it, so it lives with the post in reservation.
type PostJSON = reservation.PostJSON

// NewPostJSON returns p as the API shows it.
func NewPostJSON(p *reservation.Post) PostJSON { return reservation.NewPostJSON(p) }
