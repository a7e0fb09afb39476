# Docs: every relative link in README.md, */README.md and docs/*.md resolves (anchors included), every file path
# and `name()` the chapters mention exists in the sources, every table of measured numbers names its machine and
# command, and no file of the tree speaks of how the project was made (tools/check_docs.py says what exactly it
# checks). A second test runs the checker on a small tree with one of each mistake, so that a checker that stopped
# catching them fails.
if(Python3_Interpreter_FOUND)
  add_test(NAME docs_links_and_names
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/check_docs.py --root ${CMAKE_SOURCE_DIR})
  add_test(NAME docs_checker_self_test COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/check_docs.py --self-test)
  # The index rules the tensor-core figures draw, read out of the kernel's source (tools/kernel_rules.py).
  add_test(NAME docs_kernel_rules COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/test_kernel_rules.py)
  set_tests_properties(docs_links_and_names docs_checker_self_test docs_kernel_rules PROPERTIES LABELS "docs;cpu")
else()
  add_test(NAME docs_links_and_names COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: no Python 3 interpreter to run tools/check_docs.py")
  set_tests_properties(docs_links_and_names PROPERTIES LABELS "docs;cpu" SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
