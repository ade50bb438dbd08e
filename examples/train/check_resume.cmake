# ctest case example/mixprec-train-resume: a run continued with --resume ends where the uninterrupted run
# ends, bit for bit. Under float32, p=f32,c=f16,o=f32 (dynamic loss scaling), p=bf16,c=bf16,o=f32
# (float32 master weights in the optimiser state) and p=f32,c=bf16,o=f32+fp8 (float8 products with
# delayed scaling: amax histories and scales in the state):
#  - run A trains iterations 0..40 in one go;
#  - run B trains 0..20, and run C continues B from its checkpoints up to 40 (--resume);
#  - C's parameter checkpoints are byte-identical to A's, and its final train and validation losses
#    are A's;
#  - continuing with another seed, or to an iteration the saved run already reached, is refused.
# Invoked as: cmake -DEXE=<mixprec-train> -DOUT=<folder> -P check_resume.cmake
set(policies f32 p=f32,c=f16,o=f32 p=bf16,c=bf16,o=f32 p=f32,c=bf16,o=f32+fp8)
set(common --policy f32 --policy p=f32,c=f16,o=f32 --policy p=bf16,c=bf16,o=f32 --policy p=f32,c=bf16,o=f32+fp8
           --eval-every 10 --eval-iters 2
           --batch 4 --val-windows 8 --n-layer 1 --n-head 2 --n-embd 32 --block 16 --threads 2)
file(REMOVE_RECURSE ${OUT})
function(run name)
  execute_process(COMMAND ${EXE} ${common} ${ARGN} --out ${OUT}/${name} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mixprec-train (run ${name}) exited with ${rc}: ${err}\n${out}")
  endif()
  set(out_${name} "${out}" PARENT_SCOPE)
endfunction()
run(A --iters 40)
run(B --iters 20)
run(C --iters 40 --resume ${OUT}/B)

set(number "[0-9]+\\.[0-9]+")
foreach(policy IN LISTS policies)
  string(REPLACE "=" "-" safe "${policy}")
  string(REPLACE "," "_" safe "${safe}")
  string(REPLACE "+" "_" safe "${safe}")
  string(REPLACE "+" "\\+" policy_re "${policy}")
  file(SHA256 ${OUT}/A/params_${safe}.safetensors a)
  file(SHA256 ${OUT}/C/params_${safe}.safetensors c)
  if(NOT a STREQUAL c)
    message(FATAL_ERROR "policy ${policy}: the continued run's parameters differ from the uninterrupted run's")
  endif()
  foreach(run A C)
    string(REGEX MATCH "\nfinal policy=${policy_re} iters=40 train_loss=(${number}) val_loss=(${number}) " line
           "${out_${run}}")
    if(NOT line)
      message(FATAL_ERROR "run ${run}: no final line for policy ${policy}")
    endif()
    set(losses_${run} "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}")
  endforeach()
  if(NOT losses_A STREQUAL losses_C)
    message(FATAL_ERROR "policy ${policy}: final losses ${losses_C} after resuming, ${losses_A} without")
  endif()
endforeach()

# Refusals: another seed; an iteration count the saved run already reached.
foreach(bad "--seed;7;--iters;40" "--iters;20")
  execute_process(COMMAND ${EXE} ${common} ${bad} --resume ${OUT}/B --out ${OUT}/bad OUTPUT_VARIABLE out
                  ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0 OR NOT err MATCHES "resume: ")
    message(FATAL_ERROR "mixprec-train ${bad} --resume should fail with a 'resume:' message; got ${rc}: ${err}")
  endif()
endforeach()
message(STATUS "mixprec-train --resume: four policies continued to the uninterrupted runs' parameters, bit for bit")
