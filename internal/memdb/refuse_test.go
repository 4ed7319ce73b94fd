package memdb

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestShapesWhoseAnswerTheModelWouldGuessAreRefused: each statement here
// has an answer on MongoDB that the model does not compute (a $max over
// one array's elements, a sort by a path into embedded documents, a
// $slice that keeps every other field, an $ifNull of one argument, which
// the server rejects); the model refuses it rather than answer otherwise.
func TestShapesWhoseAnswerTheModelWouldGuessAreRefused(t *testing.T) {
	project := func(spec bson.D) bson.A { return bson.A{bson.D{{Key: "$project", Value: spec}}} }
	for name, pipeline := range map[string]bson.A{
		"$max of one array":  project(bson.D{{Key: "m", Value: bson.D{{Key: "$max", Value: "$arr"}}}}),
		"$min of one array":  project(bson.D{{Key: "m", Value: bson.D{{Key: "$min", Value: bson.A{"$arr"}}}}}),
		"$sort by a path":    {bson.D{{Key: "$sort", Value: bson.D{{Key: "sub.k", Value: 1}}}}},
		"$slice alone":       project(bson.D{{Key: "arr", Value: bson.D{{Key: "$slice", Value: -1}}}}),
		"$ifNull of one":     project(bson.D{{Key: "m", Value: bson.D{{Key: "$ifNull", Value: bson.A{"$x"}}}}}),
		"$ifNull of nothing": project(bson.D{{Key: "m", Value: bson.D{{Key: "$ifNull", Value: bson.A{}}}}}),
	} {
		t.Run(name, func(t *testing.T) {
			var c Table
			for i, k := range []int32{2, 1} {
				doc := bson.D{{Key: "_id", Value: int32(i)}, {Key: "arr", Value: bson.A{k, int32(3)}}, {Key: "sub", Value: bson.D{{Key: "k", Value: k}}}, {Key: "x", Value: "y"}}
				if err := c.InsertOne(time.Now(), doc); err != nil {
					t.Fatal(err)
				}
			}
			docs, err := c.Aggregate(time.Now(), pipeline)
			if !errors.Is(err, ErrNotModelled) {
				t.Fatalf("got %v, %v; want ErrNotModelled", docs, err)
			}
		})
	}
}
