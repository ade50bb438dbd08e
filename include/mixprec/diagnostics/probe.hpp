/// \file
/// \brief The probe interface (`diagnostics::probe`, `null_probe`, `probe_enabled_v`, and the
/// `floating_element` / `tensor_range` concepts). It is defined in `mixprec/nn/probe.hpp`, beside the
/// layers that call it; this header is where diagnostics users find it. Core header: no Eigen, no
/// xtensor.
#pragma once

#include "mixprec/nn/probe.hpp"
