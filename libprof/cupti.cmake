# The CUDA/CUPTI module (issue 6). Included by the top CMakeLists.txt after add_subdirectory(libprof)
# (it adds a source to prof and prof_preload). Does nothing unless GRADPROF_HAVE_CUPTI.
#   prof_cupti   libprof_cupti.so: CUDA_INJECTION64_PATH module (InitializeInjection). It links
#                nothing of libprof: it finds the recorder's bridge (cupti_bridge.c, exported by
#                libprof_preload.so and libprof.so) with dlsym(RTLD_DEFAULT) at init.
#   prof_cupti_core  the same code as a static library, for tests/test_cupti.c.
if(NOT GRADPROF_HAVE_CUPTI)
  return()
endif()

set(_gp_cupti_dir ${CMAKE_CURRENT_LIST_DIR})
target_sources(prof PRIVATE ${_gp_cupti_dir}/cupti_bridge.c)
target_sources(prof_preload PRIVATE ${_gp_cupti_dir}/cupti_bridge.c)

add_library(prof_cupti MODULE ${_gp_cupti_dir}/cupti.c)
target_include_directories(prof_cupti PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(prof_cupti PRIVATE CUDA::cupti Threads::Threads ${CMAKE_DL_LIBS})
set_target_properties(prof_cupti PROPERTIES PREFIX "lib" OUTPUT_NAME prof_cupti
                      C_VISIBILITY_PRESET hidden
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/libprof)
# Loaded into other programs: never sanitized (like prof_preload).
if(GRADPROF_SANITIZE)
  target_compile_options(prof_cupti PRIVATE -fno-sanitize=all)
  target_link_options(prof_cupti PRIVATE -fno-sanitize=all)
endif()

add_library(prof_cupti_core STATIC ${_gp_cupti_dir}/cupti.c)
target_include_directories(prof_cupti_core PUBLIC ${PROJECT_SOURCE_DIR}/include ${_gp_cupti_dir})
target_link_libraries(prof_cupti_core PUBLIC CUDA::cupti Threads::Threads ${CMAKE_DL_LIBS})
