# Lineage: the house rules of the sources (docs/architecture.md). tools/lineage.py checks the include layering
# (the foundation at the bottom, each lesson above only the foundation and its own phase), every derived file of
# lineage.tsv against its base and its diff budget, and that the docs' diff tables are the manifest's; its self-test
# runs each check on a small tree with one mistake of each kind, so that a check that stopped catching them fails.
if(Python3_Interpreter_FOUND)
  foreach(check layers check docs self-test)
    add_test(NAME lineage_${check} COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/lineage.py ${check}
                                           --root ${CMAKE_SOURCE_DIR})
    set_tests_properties(lineage_${check} PROPERTIES LABELS "lineage;cpu")
  endforeach()
else()
  add_test(NAME lineage_layers COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: no Python 3 interpreter to run tools/lineage.py")
  set_tests_properties(lineage_layers PROPERTIES LABELS "lineage;cpu" SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
