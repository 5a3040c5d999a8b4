package rowkey

import (
	"errors"
	"testing"
)

func TestCursorRoundTripsAndOrders(t *testing.T) {
	ps := []Position{{}, {Seq: 1}, {Seq: 1, ID: "a"}, {Seq: 1, ID: "a/b?c=d&e"}, {Seq: 1 << 60, ID: "é"}, After(1 << 60)}
	for i, p := range ps {
		c := p.Cursor()
		for _, r := range c {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				t.Errorf("cursor %q of %+v has %q: not URL-safe", c, p, r)
			}
		}
		got, err := ParseCursor(c)
		if err != nil || got != p {
			t.Errorf("ParseCursor(%q) = %+v, %v; want %+v", c, got, err, p)
		}
		if i > 0 && (!ps[i-1].Less(p) || ps[i-1].Compare(p) != -1 || p.Compare(ps[i-1]) != 1) {
			t.Errorf("%+v not before %+v", ps[i-1], p)
		}
		if p.Compare(p) != 0 {
			t.Errorf("%+v does not compare equal to itself", p)
		}
	}
	if p, err := ParseCursor(""); err != nil || p != (Position{}) {
		t.Errorf(`ParseCursor("") = %+v, %v; want the zero Position`, p, err)
	}
	for _, bad := range []string{"x", "c1.", "c1.!!", "c2.AAAAAAAAAAA", "c1.AAAA"} {
		if _, err := ParseCursor(bad); !errors.Is(err, ErrBadCursor) {
			t.Errorf("ParseCursor(%q) = %v; want ErrBadCursor", bad, err)
		}
	}
}
