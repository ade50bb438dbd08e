#pragma once
// Fixture: a format that reaches up into the layers.
#include "mixprec/nn/layer.hpp"
