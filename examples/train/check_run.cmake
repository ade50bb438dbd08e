# ctest case example/mixprec-train: trains a small GPT (1 layer, width 32, block 16, 150 iterations) under
# float32, p=f32,c=f16,o=f32 (dynamic loss scaling) and p=bf16,c=bf16,o=f32 on tinyshakespeare, and checks
# what the program reports:
#  - one `final policy=... iters=150 train_loss=... val_loss=... tokens_per_s=... skipped_steps=N` line per
#    policy, in exactly that form, with finite losses;
#  - the loss is learnt: the validation loss fell by at least 0.5 nats from its value at iteration 0
#    (ln 65 = 4.17 at initialisation);
#  - every low-precision policy's final validation loss is within 0.05 of float32's;
#  - the SVG chart and one safetensors checkpoint per policy were written.
# Invoked as: cmake -DEXE=<mixprec-train> -DOUT=<folder> -P check_run.cmake
execute_process(
  COMMAND ${EXE} --policy f32 --policy p=f32,c=f16,o=f32 --policy p=bf16,c=bf16,o=f32 --iters 150
          --eval-every 50 --eval-iters 4 --batch 4 --val-windows 32 --n-layer 1 --n-head 2 --n-embd 32 --block 16
          --threads 2 --out ${OUT}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mixprec-train exited with ${rc}: ${err}")
endif()
set(number "[0-9]+\\.[0-9]+")
foreach(policy "f32" "p=f32,c=f16,o=f32" "p=bf16,c=bf16,o=f32")
  string(REGEX MATCH "\nfinal policy=${policy} iters=150 train_loss=(${number}) val_loss=(${number}) tokens_per_s=([0-9]+) skipped_steps=([0-9]+)\n"
         line "${out}")
  if(NOT line)
    message(FATAL_ERROR "no final line of the expected form for policy ${policy}")
  endif()
  set(val_${policy} ${CMAKE_MATCH_2})
  string(REGEX MATCH "policy=${policy} iter=0 train_loss=${number} val_loss=(${number})" first "${out}")
  if(NOT first)
    message(FATAL_ERROR "no evaluation line at iteration 0 for policy ${policy}")
  endif()
  set(start ${CMAKE_MATCH_1})
  # start - final >= 0.5, in thousandths (losses have 4 decimals).
  string(REGEX REPLACE "\\.([0-9][0-9][0-9]).*" "\\1" s_frac "${start}")
  string(REGEX REPLACE "\\..*" "" s_int "${start}")
  string(REGEX REPLACE "\\.([0-9][0-9][0-9]).*" "\\1" f_frac "${val_${policy}}")
  string(REGEX REPLACE "\\..*" "" f_int "${val_${policy}}")
  math(EXPR drop "(${s_int} * 1000 + 1${s_frac} - 1000) - (${f_int} * 1000 + 1${f_frac} - 1000)")
  if(drop LESS 500)
    message(FATAL_ERROR "policy ${policy}: validation loss went from ${start} to ${val_${policy}}; expected a drop of at least 0.5")
  endif()
  set(milli_${policy} "${f_int}${f_frac}")
  if(NOT EXISTS "${OUT}/loss.svg")
    message(FATAL_ERROR "no loss chart ${OUT}/loss.svg")
  endif()
endforeach()
file(GLOB checkpoints "${OUT}/params_*.safetensors")
list(LENGTH checkpoints n)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "expected 3 parameter checkpoints in ${OUT}, found ${n}")
endif()
foreach(policy "p=f32,c=f16,o=f32" "p=bf16,c=bf16,o=f32")
  math(EXPR diff "${milli_${policy}} - ${milli_f32}")
  if(diff GREATER 50 OR diff LESS -50)
    message(FATAL_ERROR "policy ${policy}: validation loss ${val_${policy}} is not within 0.05 of float32's ${val_f32}")
  endif()
endforeach()
message(STATUS "mixprec-train: three policies trained, losses within 0.05 of float32")
