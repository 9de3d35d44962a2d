package database

import "gorm.io/gorm"

// PluckSet reads column of the rows q selects, as a list and as a set: what
// a batch asks before it writes (which of these ids are there already).
func PluckSet[T comparable](q *gorm.DB, column string) ([]T, map[T]bool, error) {
	var vals []T
	if err := q.Pluck(column, &vals).Error; err != nil {
		return nil, nil, err
	}
	set := make(map[T]bool, len(vals))
	for _, v := range vals {
		set[v] = true
	}
	return vals, set, nil
}
