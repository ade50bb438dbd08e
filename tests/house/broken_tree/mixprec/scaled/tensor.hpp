#pragma once
// Fixture: two side-by-side folders that depend on each other.
#include "mixprec/train/step.hpp"
