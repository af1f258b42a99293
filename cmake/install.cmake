# Installation (issue 16): `cmake --install BUILD [--prefix P]`, DESTDIR honoured. Included last
# by the top CMakeLists.txt, so every target exists. The layout, under the prefix:
#
#   bin/gradprof                               RPATH $ORIGIN/../<libdir> (relocatable)
#   <libdir>/libprof.so.0, libtensor.so.0      + the .so links; libtensor's RPATH is $ORIGIN
#   <libdir>/cmake/gradprof/                   find_package(gradprof CONFIG): gradprof::prof,
#                                              gradprof::tensor, and the version file
#   <libdir>/pkgconfig/gradprof.pc, gradprof-tensor.pc
#   lib/gradprof/libprof_preload.so            where `gradprof run` looks: <bin>/../lib/gradprof/
#   lib/gradprof/libprof_cupti.so              (when built)
#   lib/gradprof/python/startup/               the Python startup hook (run.c looks there too)
#   GRADPROF_PYTHON_DIR/gradprof_torch.py ...  the PyTorch helper, the pytest plugin and a
#                                              .dist-info with its pytest11 entry point
#   lib/gradprof/examples/                     the C example programs (GRADPROF_INSTALL_EXAMPLES)
#   include/gradprof/                          libprof.h, tensor.h, vocabulary.h, trace_format.h
#   share/gradprof/pytorch.rules               the built-in frame rules, as a file for --rules
#   share/man/man1/gradprof*.1                 generated from each command's --help
#   share/bash-completion/completions/gradprof
#
# lib/gradprof is fixed (not <libdir>/gradprof): run.c finds the preload library and the startup
# hook relative to the gradprof binary, at <bin>/../lib/gradprof, so bin/ must stay bin/.
include(CMakePackageConfigHelpers)

set(GRADPROF_INSTALL_PKGLIBDIR lib/gradprof)
set(GRADPROF_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradprof)

# RPATHs relative to the installed file, so the prefix can be moved (or be a dpkg -x root).
file(RELATIVE_PATH _gp_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH _gp_examples_to_lib
     ${CMAKE_INSTALL_PREFIX}/${GRADPROF_INSTALL_PKGLIBDIR}/examples ${CMAKE_INSTALL_FULL_LIBDIR})
string(REGEX REPLACE "/$" "" _gp_examples_to_lib "${_gp_examples_to_lib}")
set_target_properties(gradprof PROPERTIES INSTALL_RPATH "$ORIGIN/${_gp_bin_to_lib}")
set_target_properties(tensor PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS gradprof RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS prof tensor EXPORT gradprofTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(TARGETS prof_preload LIBRARY DESTINATION ${GRADPROF_INSTALL_PKGLIBDIR} COMPONENT runtime)
if(TARGET prof_cupti)
  install(TARGETS prof_cupti LIBRARY DESTINATION ${GRADPROF_INSTALL_PKGLIBDIR} COMPONENT runtime)
endif()
# trace.h is left out: its reader (gp_format) is internal to the tools and not installed.
install(FILES include/gradprof/libprof.h include/gradprof/tensor.h include/gradprof/vocabulary.h
              include/gradprof/trace_format.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradprof COMPONENT dev)
install(FILES tools/rules/pytorch.rules DESTINATION ${CMAKE_INSTALL_DATADIR}/gradprof
        COMPONENT runtime)

# The C examples, for the demo of an installed gradprof (run, diff, check of mlp_infer).
if(GRADPROF_INSTALL_EXAMPLES AND TARGET mlp_infer)
  set(_gp_examples mlp_infer cnn_infer transformer_infer train_mlp leak_accumulate
                   leak_eval_without_no_grad leak_cached_activation leak_collect_outputs)
  set_target_properties(${_gp_examples} PROPERTIES INSTALL_RPATH "$ORIGIN/${_gp_examples_to_lib}")
  install(TARGETS ${_gp_examples} RUNTIME DESTINATION ${GRADPROF_INSTALL_PKGLIBDIR}/examples
          COMPONENT runtime)
endif()

# ---- Python ----------------------------------------------------------------------------------
# The startup hook lives where run.c looks for it. The helper and the pytest plugin go to
# GRADPROF_PYTHON_DIR (relative to the prefix, or absolute), with a .dist-info whose
# entry_points.txt registers the plugin under pytest11, so that a pytest that sees that folder on
# its sys.path (the system interpreter's dist-packages, or PYTHONPATH) loads it by itself.
install(FILES libprof/python/startup/sitecustomize.py
        DESTINATION ${GRADPROF_INSTALL_PKGLIBDIR}/python/startup COMPONENT runtime)
file(GLOB _gp_py_modules CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/libprof/python/*.py)
install(FILES ${_gp_py_modules} DESTINATION ${GRADPROF_PYTHON_DIR} COMPONENT runtime)
set(_gp_distinfo ${PROJECT_BINARY_DIR}/python-dist/gradprof-${PROJECT_VERSION}.dist-info)
set(_gp_entry_points "")
if(EXISTS ${PROJECT_SOURCE_DIR}/libprof/python/gradprof_pytest.py)
  set(_gp_entry_points "[pytest11]\ngradprof = gradprof_pytest\n")
endif()
file(WRITE ${_gp_distinfo}/METADATA
     "Metadata-Version: 2.1\nName: gradprof\nVersion: ${PROJECT_VERSION}\n"
     "Summary: gradprof's PyTorch helper (gradprof_torch) and pytest plugin (gradprof_pytest)\n")
file(WRITE ${_gp_distinfo}/entry_points.txt "${_gp_entry_points}")
file(WRITE ${_gp_distinfo}/top_level.txt "gradprof_pytest\ngradprof_torch\n")
file(WRITE ${_gp_distinfo}/INSTALLER "cmake\n")
install(DIRECTORY ${_gp_distinfo} DESTINATION ${GRADPROF_PYTHON_DIR} COMPONENT runtime)

# ---- man pages and bash completion (tools/man) ------------------------------------------------
install(FILES ${GRADPROF_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
install(FILES tools/completion/gradprof.bash DESTINATION
        ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME gradprof COMPONENT runtime)

# ---- for consumers: the CMake package and pkg-config files -----------------------------------
# Both libraries are shared and link their dependencies privately (libunwind, threads, libdl and
# libm for libprof; OpenBLAS, libm and threads for libtensor), so a consumer needs none of them to
# link: the CMake package exports only the targets; the .pc files list them as private.
install(EXPORT gradprofTargets NAMESPACE gradprof:: DESTINATION ${GRADPROF_INSTALL_CMAKEDIR}
        COMPONENT dev)
configure_package_config_file(cmake/gradprofConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/gradprofConfig.cmake INSTALL_DESTINATION ${GRADPROF_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/gradprofConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/gradprofConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/gradprofConfigVersion.cmake
        DESTINATION ${GRADPROF_INSTALL_CMAKEDIR} COMPONENT dev)
# prefix= relative to the .pc file (relocatable), except in /usr, where pkg-config then recognises
# the system directories and leaves them out of the flags.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(GRADPROF_PC_PREFIX "/usr")
else()
  file(RELATIVE_PATH _gp_pc_to_prefix ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
  string(REGEX REPLACE "/$" "" _gp_pc_to_prefix "${_gp_pc_to_prefix}")
  set(GRADPROF_PC_PREFIX "\${pcfiledir}/${_gp_pc_to_prefix}")
endif()
foreach(_pc gradprof gradprof-tensor)
  configure_file(cmake/${_pc}.pc.in ${PROJECT_BINARY_DIR}/cmake/${_pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cmake/${_pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()
