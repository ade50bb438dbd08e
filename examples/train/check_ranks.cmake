# ctest case example/mixprec-train-ranks: data parallel across 2 MPI ranks (--distributed under mpiexec -n 2)
# against one process, on a small GPT (1 layer, width 32, block 16, batch 4, 100 iterations, f32 and
# p=f32,c=bf16,o=f32), checking:
#  - the distributed run's final lines have the single process's form plus ` ranks=2`, and only rank 0
#    printed them (one final line per policy);
#  - each policy's final validation loss is within 0.01 of the single process's (the same batches, the
#    rows split between the ranks: only the order of the gradient additions differs);
#  - the ranks' parameters agreed at the end (the program fails otherwise);
#  - --resume across rank counts: one process continuing the 2-rank run from iteration 100 to 120 ends
#    within 0.01 of one process continuing its own run (the saved state does not depend on the ranks);
#  - ZeRO-1 (--zero): the 2-rank run writes the same parameter and train-state files, byte for byte, as
#    the 2-rank run without it, with at most 0.6 of its optimiser state on rank 0; and 2 ranks with --zero
#    continue one process's files to iteration 120 within 0.01 of one process continuing them.
# Invoked as: cmake -DEXE=<mixprec-train> -DMPIEXEC=<mpiexec> -DNP_FLAG=<-n> -DOUT=<folder> -P check_ranks.cmake
set(common --policy f32 --policy p=f32,c=bf16,o=f32 --eval-every 100 --eval-iters 2 --batch 4
           --val-windows 32 --n-layer 1 --n-head 2 --n-embd 32 --block 16 --threads 1)
execute_process(COMMAND ${EXE} ${common} --iters 100 --out ${OUT}/one OUTPUT_VARIABLE one ERROR_VARIABLE one_err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mixprec-train (one process) exited with ${rc}: ${one_err}")
endif()
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 2 ${EXE} ${common} --iters 100 --distributed --out ${OUT}/two
                OUTPUT_VARIABLE two ERROR_VARIABLE two_err RESULT_VARIABLE rc)
message("${two}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mixprec-train under ${MPIEXEC} ${NP_FLAG} 2 exited with ${rc}: ${two_err}")
endif()
set(number "[0-9]+\\.[0-9]+")
# Fails unless the losses `a` and `b` (4 decimals, as printed) are within 0.01 of each other.
function(require_close what a b)
  string(REPLACE "." "" a_units "${a}")
  string(REPLACE "." "" b_units "${b}")
  math(EXPR diff "${b_units} - ${a_units}")
  if(diff GREATER 100 OR diff LESS -100)
    message(FATAL_ERROR "${what}: val_loss ${b} against ${a}: more than 0.01 apart")
  endif()
  message(STATUS "${what}: val_loss ${b} against ${a}")
endfunction()
# The lines before the closing summary (which repeats the final lines).
string(FIND "${two}" "\nsummary\n" summary_at)
if(summary_at GREATER -1)
  string(SUBSTRING "${two}" 0 ${summary_at} two_runs)
else()
  set(two_runs "${two}")
endif()
foreach(policy "f32" "p=f32,c=bf16,o=f32")
  string(REGEX MATCH "\nfinal policy=${policy} iters=100 train_loss=${number} val_loss=(${number}) tokens_per_s=[0-9]+ skipped_steps=0\n"
         line "${one}")
  if(NOT line)
    message(FATAL_ERROR "one process: no final line for policy ${policy}")
  endif()
  set(val_one ${CMAKE_MATCH_1})
  string(REGEX MATCHALL "final policy=${policy} iters=100 [^\n]*" lines "${two_runs}")
  list(LENGTH lines count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "2 ranks: ${count} final lines for policy ${policy}; rank 0 alone must print one")
  endif()
  string(REGEX MATCH "val_loss=(${number}) tokens_per_s=[0-9]+ skipped_steps=0 ranks=2$" tail "${lines}")
  if(NOT tail)
    message(FATAL_ERROR "2 ranks: the final line '${lines}' does not end in 'skipped_steps=0 ranks=2'")
  endif()
  set(val_two ${CMAKE_MATCH_1})
  require_close("policy ${policy}, 2 ranks against one process" "${val_one}" "${val_two}")
endforeach()

# Runs a resumed run to iteration 120 and sets `out_var` to its final f32 validation loss; `what` names it.
function(resumed_loss out_var what)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE resumed ERROR_VARIABLE resumed_err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} exited with ${rc}: ${resumed_err}")
  endif()
  string(REGEX MATCH "\nfinal policy=f32 iters=120 train_loss=${number} val_loss=(${number})" line "${resumed}")
  if(NOT line)
    message(FATAL_ERROR "${what}: no final line for policy f32 at iteration 120")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# --resume across rank counts: the 2-rank run's files continued on one process.
foreach(from one two)
  resumed_loss(resumed_${from} "one process resuming the ${from}-rank run"
               ${EXE} ${common} --iters 120 --resume ${OUT}/${from} --out ${OUT}/${from}_resumed)
endforeach()
require_close("resumed to 120 on one process, from 2 ranks' files against one process's" "${resumed_one}"
              "${resumed_two}")

# ZeRO-1: the same files, byte for byte, and rank 0's share of the optimiser state.
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 2 ${EXE} ${common} --iters 100 --distributed --zero --out ${OUT}/zero
                OUTPUT_VARIABLE zero ERROR_VARIABLE zero_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mixprec-train --zero under ${MPIEXEC} ${NP_FLAG} 2 exited with ${rc}: ${zero_err}")
endif()
foreach(file params_f32 train_state_f32 params_p-f32_c-bf16_o-f32 train_state_p-f32_c-bf16_o-f32)
  file(SHA256 ${OUT}/two/${file}.safetensors unsharded)
  file(SHA256 ${OUT}/zero/${file}.safetensors sharded)
  if(NOT unsharded STREQUAL sharded)
    message(FATAL_ERROR "--zero: ${file}.safetensors differs from the run without --zero")
  endif()
endforeach()
string(REGEX MATCH "optimizer_state policy=f32 bytes=([0-9]+) \\(every rank\\)" line "${two}")
set(every_rank "${CMAKE_MATCH_1}")
string(REGEX MATCH "optimizer_state policy=f32 bytes=([0-9]+) \\(rank 0's share: --zero\\)" line "${zero}")
set(share "${CMAKE_MATCH_1}")
if(NOT every_rank OR NOT share)
  message(FATAL_ERROR "no optimizer_state line for policy f32 in the runs with and without --zero")
endif()
math(EXPR share_x10 "${share} * 10")
math(EXPR limit_x10 "${every_rank} * 6")
if(share_x10 GREATER limit_x10)
  message(FATAL_ERROR "--zero: rank 0 holds ${share} bytes of optimiser state, more than 0.6 of ${every_rank}")
endif()
message(STATUS "--zero: the same files; rank 0 holds ${share} of ${every_rank} bytes of optimiser state")
resumed_loss(resumed_zero "2 ranks with --zero resuming one process's run"
             ${MPIEXEC} ${NP_FLAG} 2 ${EXE} ${common} --iters 120 --distributed --zero --resume ${OUT}/one
             --out ${OUT}/one_resumed_zero)
require_close("resumed to 120 on 2 ranks with --zero, against one process" "${resumed_one}" "${resumed_zero}")
