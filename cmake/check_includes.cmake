# Fails when a source file includes a header from a folder its folder may not depend on:
# the arrows of docs/ARCHITECTURE.md ("Folders and their arrows"), checked on the text of
# every `#include "folder/..."`. The build runs it on every build (target
# cascade_arrows), and a test runs it on a tree with a forbidden include to show that it
# fails. Usage: cmake -DROOT=<source tree> -P cmake/check_includes.cmake
#
# Link-level arrows (which library may link which) are checked at configure time by
# cmake/arrows.cmake; this script catches header-only uses the linker cannot see.
cmake_policy(SET CMP0057 NEW)
if(NOT ROOT)
  message(FATAL_ERROR "check_includes: pass -DROOT=<source tree>")
endif()

# Folder -> folders its files may include (its own is always allowed). The longest
# matching folder names a file's room: model/format/ is its own, below model/.
set(allowed_core "")
set(allowed_kernels core)
set(allowed_comm core)
set(allowed_text core)
set(allowed_sampling core)
set(allowed_grammar core)
set(allowed_model/format core text)
set(allowed_model core kernels comm text sampling model/format)
set(allowed_security core)
set(allowed_wire core sampling)
set(allowed_worker core kernels comm text sampling model model/format proto wire security)
set(allowed_coordinator core text sampling grammar model/format proto wire security coordinator/front coordinator/serving
    coordinator/control)
# The coordinator's rooms: front -> serving -> control, each over the root's config and
# planner (bring-up, at the root too, is above them all: the link arrows keep it there).
set(allowed_coordinator/front core text sampling grammar model/format proto wire security coordinator coordinator/serving
    coordinator/control)
set(allowed_coordinator/serving core text sampling grammar proto wire coordinator coordinator/control)
set(allowed_coordinator/control core proto wire security coordinator)
set(allowed_client core text sampling model model/format proto wire security)
set(rooms model/format coordinator/front coordinator/serving coordinator/control core kernels comm text sampling grammar model
    security wire worker coordinator client)

# The room of a path relative to ROOT ("" when it is none of them).
function(room_of path out)
  foreach(room ${rooms})
    string(LENGTH "${room}/" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL "${room}/")
      set(${out} ${room} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

set(violations "")
foreach(room ${rooms})
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/${room}/*.h ${ROOT}/${room}/*.cc ${ROOT}/${room}/*.cu
       ${ROOT}/${room}/*.cuh)
  foreach(file ${files})
    room_of(${file} own)
    if(NOT own STREQUAL room)
      continue()  # A file of a deeper room (model/format/ while scanning model/).
    endif()
    file(STRINGS ${ROOT}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" header "${line}")
      room_of(${header} target)
      if(target STREQUAL "" OR target STREQUAL own)
        continue()
      endif()
      set(allowed ${allowed_${own}})
      if(NOT target IN_LIST allowed)
        string(APPEND violations "\n  ${file}: includes \"${header}\" (${own}/ may include only: ${allowed_${own}})")
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "Forbidden include arrows (see docs/ARCHITECTURE.md):${violations}")
endif()
