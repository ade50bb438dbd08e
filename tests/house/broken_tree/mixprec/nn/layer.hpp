#pragma once
// Fixture: a layer that includes an umbrella.
#include <mixprec/core.hpp>
