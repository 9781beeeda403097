# `cmake --install BUILD [--prefix DIR]` (default prefix /usr/local): the layertap binary into bin/,
# wrappers for the Python tools (layertap-prep, layertap-export) that run them from the Python
# environment tools/python_env.sh makes (LAYERTAP_PYENV, default /opt/layertap-pyenv), the job
# scripts and example job files into share/layertap/jobs, and the docs into share/doc/layertap.
include(GNUInstallDirs)
set(LAYERTAP_PYENV "/opt/layertap-pyenv" CACHE PATH "Python environment of layertap-prep/-export (tools/python_env.sh)")
foreach(tool layertap-prep layertap-export)
  set(LAYERTAP_TOOL ${tool})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/python_tool.sh.in ${PROJECT_BINARY_DIR}/bin/${tool} @ONLY)
  install(PROGRAMS ${PROJECT_BINARY_DIR}/bin/${tool} DESTINATION ${CMAKE_INSTALL_BINDIR})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/jobs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/layertap/jobs
        USE_SOURCE_PERMISSIONS)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
