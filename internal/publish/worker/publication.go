package worker

import "time"

// PublicationStatus is where a publication stands.
type PublicationStatus string

// The publication statuses. A PENDING publication waits for its time; the
// others are settled: PUBLISHED (the post is PUBLISHED), CANCELLED (the post
// was cancelled first), EXPIRED (the post was not published by its
// publishBy and is EXPIRED; migration 00011), FAILED (the publisher refused
// it for good; the post stays WORKING for an operator).
const (
	PublicationPending   PublicationStatus = "PENDING"
	PublicationPublished PublicationStatus = "PUBLISHED"
	PublicationCancelled PublicationStatus = "CANCELLED"
	PublicationExpired   PublicationStatus = "EXPIRED"
	PublicationFailed    PublicationStatus = "FAILED"
)

// Publication is one row of the publications table (migration 00005): the
// worker's durable schedule. It is written with the reservation event's
// inbox row, so every consumed reservation has one, and a worker that is
// assigned PartitionID re-arms its timer after a restart or a rebalance.
type Publication struct {
	PostID      int64             `gorm:"column:post_id;primaryKey;autoIncrement:false"`
	EventID     string            `gorm:"column:event_id"`
	PartitionID int32             `gorm:"column:partition_id"`
	ScheduledAt time.Time         `gorm:"column:scheduled_at"`
	Status      PublicationStatus `gorm:"column:status"`
	Attempts    int               `gorm:"column:attempts"`
	LastError   *string           `gorm:"column:last_error"`
	CreatedAt   time.Time         `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt   time.Time         `gorm:"column:updated_at;autoUpdateTime:false"`
	PublishedAt *time.Time        `gorm:"column:published_at"`
	// Traceparent is the trace context of the handling of the reservation
	// event (migration 00007): the publication's span is its child. nil:
	// none.
	Traceparent *string `gorm:"column:traceparent"`
}

// TableName is the table of migration 00005.
func (Publication) TableName() string { return "publications" }
