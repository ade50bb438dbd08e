// The compiled library's one definition of the safetensors header's JSON reader and writer
// (mixprec/train/detail/safetensors_json.hpp) and of the optimisers' state saving and loading
// (mixprec/train/detail/optimizer_state.hpp), so that users' training translation units in the
// compiled mode parse neither nlohmann-json nor those functions.
#define MIXPREC_CHECKPOINT_DEFINITIONS
#include "mixprec/train/detail/optimizer_state.hpp"
#include "mixprec/train/detail/safetensors_json.hpp"
