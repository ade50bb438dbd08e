/// \file
/// \brief mixprec's version. CMake reads it from here (the project's only copy of the number).
#pragma once

/// Major version: 0 while the API may still change between minor versions.
#define MIXPREC_VERSION_MAJOR 0
/// Minor version: bumped by every release that changes the API (0.2: headers moved into layer folders).
#define MIXPREC_VERSION_MINOR 2
/// Patch version.
#define MIXPREC_VERSION_PATCH 0
/// The version as one comparable number: major * 10000 + minor * 100 + patch.
#define MIXPREC_VERSION (MIXPREC_VERSION_MAJOR * 10000 + MIXPREC_VERSION_MINOR * 100 + MIXPREC_VERSION_PATCH)
