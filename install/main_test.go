package install

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
