#pragma once
#include "mixprec/formats/format.hpp"
// Fixture: an include of a header that does not exist.
#include "mixprec/formats/missing.hpp"
