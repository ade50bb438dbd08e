/// \file
/// \brief Planted faults for the ctest case house/header_text_catches: one on each line from 3 to 12.
/// The panels stream at 21-25 GB/s from memory.
/// A core multiplies at 172 GFLOP/s.
/// The decode makes 9.05 tokens/s.
/// A core decodes ~14 G weights/s.
/// Converted at 17.7 G/s in L2.
/// The rows move 1.3x the bytes per second of the old ones.
/// The scalar codec costs ~10 ns per element.
/// The formulas are in TRAINING.md §1.
/// The recipe: ../shared/docs/KERNELS.md.
/// See docs/Present.md (the file is docs/present.md).
/// Not faults: `x * (1/s)` and x / s are exact; a worker spins ~0.1 ms; within 15 units of 2^-24.
/// Not faults: docs/present.md, "Planted"; present.md; (owner/repo, docs/idea.md); https://example.org/a.md.
#pragma once
