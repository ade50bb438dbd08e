// The compiled library's one definition of the safetensors header's JSON reader and writer
// (mixprec/train/detail/safetensors_json.hpp), so that users' training translation units in the
// compiled mode do not parse nlohmann-json.
#define MIXPREC_CHECKPOINT_DEFINITIONS
#include "mixprec/train/detail/safetensors_json.hpp"
