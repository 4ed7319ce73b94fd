// Package doccheck is what TestDocFindingsNameEachShortfall reads: each
// exported identifier whose name begins with Bad falls short once.
package doccheck

func BadUndocumented() {}

// BadLongOpening opens with four lines.
// Two.
// Three.
// Four.
func BadLongOpening() {}

// does not begin with its name.
func BadUnnamed() {}

// GoodFunc opens with its contract.
//
// Its detail may take many lines,
// as many as it needs,
// after a blank line.
func GoodFunc() {}

// A GoodType may begin with an article.
type GoodType[T any] struct {
	Trailing int // a trailing line comment counts
	// Above is documented above.
	Above    int
	BadField int
	GoodEmbedded
	unexported int
}

func (GoodType[T]) BadMethod() {}

// GoodEmbedded is embedded: the field's doc is the type's.
type GoodEmbedded struct{}

type unexported struct{}

func (unexported) Exported() {}

// GoodInterface has a method without a doc.
type GoodInterface interface {
	BadInterfaceMethod()
	// GoodInterfaceMethod is documented.
	GoodInterfaceMethod()
}

// A group's doc does not document each constant in it.
const (
	GoodTrailing = 1 // a trailing comment counts
	// GoodAbove is documented above.
	GoodAbove  = 2
	BadInGroup = 3
)

// GoodAlone takes its declaration's doc.
var GoodAlone = 4
