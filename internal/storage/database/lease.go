package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Lease is one row of the leases table (migration 00011): a role that one
// instance among those on the database holds until ExpiresAt, by the
// database's clock, unless it renews it first.
type Lease struct {
	// Name is the role, such as "overdue-check".
	Name string `gorm:"column:name;primaryKey"`
	// Holder is the instance id of the holder.
	Holder string `gorm:"column:holder"`
	// Info is what the holder tells the others, such as an address.
	Info string `gorm:"column:info"`
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time `gorm:"column:expires_at"`
}

// TableName is the table of migration 00011.
func (Lease) TableName() string { return "leases" }

// AcquireLease takes the lease name for holder for ttl, by the database's
// clock, or renews it when holder has it already; it fails to take it while
// another holder's lease has not expired. It returns the lease as it stands
// afterwards and whether holder has it. The take is one conditional UPDATE
// (or the first INSERT), so two instances racing for a free lease end with
// one holder.
func AcquireLease(ctx context.Context, db *gorm.DB, name, holder, info string, ttl time.Duration) (Lease, bool, error) {
	var l Lease
	err := Transaction(ctx, db, func(tx *gorm.DB) error {
		now, err := Now(ctx, tx)
		if err != nil {
			return err
		}
		until := now.Add(ttl)
		res := tx.Model(&Lease{}).Where("name = ? AND (holder = ? OR expires_at < ?)", name, holder, now).
			Updates(map[string]any{"holder": holder, "info": info, "expires_at": until})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if err := DriverOf(tx).InsertIgnore(tx).
				Create(&Lease{Name: name, Holder: holder, Info: info, ExpiresAt: until}).Error; err != nil {
				return err
			}
		}
		return tx.Where("name = ?", name).Take(&l).Error
	})
	if err != nil {
		return Lease{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	return l, l.Holder == holder, nil
}

// ReadLease returns the lease name as it stands, and whether it is held now
// by the database's clock; a lease never taken is not held.
func ReadLease(ctx context.Context, db *gorm.DB, name string) (Lease, bool, error) {
	var l Lease
	err := db.WithContext(ctx).Where("name = ?", name).Take(&l).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	now, err := Now(ctx, db)
	if err != nil {
		return Lease{}, false, err
	}
	return l, !l.ExpiresAt.Before(now), nil
}

// ReleaseLease gives the lease name up if holder has it, so that another
// instance may take it at once instead of after its expiry.
func ReleaseLease(ctx context.Context, db *gorm.DB, name, holder string) error {
	if err := db.WithContext(ctx).Where("name = ? AND holder = ?", name, holder).Delete(&Lease{}).Error; err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}
