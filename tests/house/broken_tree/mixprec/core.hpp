#pragma once
// Fixture: an umbrella.
#include "mixprec/formats/format.hpp"
